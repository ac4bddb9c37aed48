package devices

import (
	"fmt"
	"strconv"
	"testing"
)

func BenchmarkCompileBaseline(b *testing.B) {
	rules := Baseline(BaselineOptions{KVM: true, Disks: []Disk{{Major: 7, Minor: 0}}})
	for b.Loop() {
		if _, err := Compile(rules, CompileOptions{Grants: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGrantRevoke: one Grant plus one Revoke (two map lookups and updates/deletes).
func BenchmarkGrantRevoke(b *testing.B) {
	cg := newTestCgroup(b)
	f, err := Attach(cg.Path, Baseline(BaselineOptions{}))
	must(b, err)
	b.Cleanup(func() { f.Close() })
	r := Allow(BlockDevice, 7, 0, ReadWrite)
	for b.Loop() {
		must(b, f.Grant(r))
		must(b, f.Revoke(r))
	}
}

// BenchmarkAttachReplace: an Attach with other static rules, i.e. compile, load (verifier),
// rules map, atomic BPF_F_REPLACE.
func BenchmarkAttachReplace(b *testing.B) {
	cg := newTestCgroup(b)
	sets := [][]Rule{Baseline(BaselineOptions{}), Baseline(BaselineOptions{KVM: true})}
	i := 0
	for b.Loop() {
		f, err := Attach(cg.Path, sets[i%2])
		must(b, err)
		f.Close()
		i++
	}
}

// BenchmarkOpen: open+close of a device from a process in a cgroup, without a filter and
// with the baseline filter deciding by a static rule, by a grant (all static blocks miss,
// first lookup hits) and by denial (everything misses, four lookups).
func BenchmarkOpen(b *testing.B) {
	kvmDev, _ := kvmNode(b) // without a kvm module: the check, then ENODEV from the misc driver
	for _, tc := range []struct {
		name, path string
		filter     bool
	}{
		{"unfiltered/null", "/dev/null", false},
		{"static/null", "/dev/null", true},
		{"grant/kvm", kvmDev, true},
		{"denied/loop-control", "/dev/loop-control", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cg := newTestCgroup(b)
			if tc.filter {
				f, err := Attach(cg.Path, Baseline(BaselineOptions{}))
				must(b, err)
				b.Cleanup(func() { f.Close() })
				must(b, f.Grant(Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)))
			}
			c := startChild(b, cg)
			b.ResetTimer()
			ns, err := strconv.ParseInt(c.do(fmt.Sprintf("bench %s %d", tc.path, b.N)), 10, 64)
			b.StopTimer()
			must(b, err)
			b.ReportMetric(float64(ns), "child-ns/open")
		})
	}
}
