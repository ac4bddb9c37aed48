package devices

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/prereq"
	"golang.org/x/sys/unix"
)

// TestKernelMatchesEvaluate checks the kernel itself against Evaluate on a bounded random
// sample: per case a fresh cgroup gets random static rules and grants, and a process in it
// performs real mknod(2) (m) and open(2) (r, w, rw) on device nodes made outside the cgroup.
// The kernel's device check runs before any driver, so EPERM means "denied" and anything else
// (success, ENXIO for an absent driver) means "allowed". Numbers come from majors 60-62 ("local
// use", no driver here), so no real device is ever opened.
func TestKernelMatchesEvaluate(t *testing.T) {
	prereq.Root(t)
	rng := rand.New(rand.NewPCG(7, 11))
	kMajors := []int64{Wildcard, 60, 61, 62}
	kMinors := []int64{Wildcard, 0, 1, 2}
	pick := func(set []int64) int64 { return set[rng.IntN(len(set))] }
	rule := func() Rule {
		return Rule{Type: types[rng.IntN(3)], Major: pick(kMajors), Minor: pick(kMinors),
			Access: Access(1 + rng.IntN(7)), Allow: rng.IntN(4) != 0}
	}
	const cases, requests = 12, 24
	var checked, allowed int
	for i := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var static, grants []Rule
			for range rng.IntN(6) {
				static = append(static, rule())
			}
			for range rng.IntN(4) {
				g := rule()
				g.Allow = true
				grants = append(grants, g)
			}
			cg := newTestCgroup(t)
			f, err := Attach(cg.Path, static)
			must(t, err)
			t.Cleanup(func() { f.Close() })
			for _, g := range grants {
				must(t, f.Grant(g))
			}
			c := startChild(t, cg)
			dir := t.TempDir()
			all := append(append([]Rule(nil), static...), grants...)
			for j := range requests {
				req := Request{Type: types[rng.IntN(2)], Major: uint32(kMajors[1+rng.IntN(3)]),
					Minor: uint32(kMinors[1+rng.IntN(3)]), Access: []Access{Mknod, Read, Write, ReadWrite}[rng.IntN(4)]}
				want := Evaluate(all, req)
				typ := string(req.Type)
				var errno unix.Errno
				if req.Access == Mknod {
					errno = c.mknod(filepath.Join(dir, fmt.Sprintf("m%d", j)), typ, req.Major, req.Minor)
				} else {
					node := filepath.Join(dir, fmt.Sprintf("n%d", j))
					mode := uint32(unix.S_IFCHR)
					if req.Type == BlockDevice {
						mode = unix.S_IFBLK
					}
					must(t, unix.Mknod(node, mode|0o600, int(unix.Mkdev(req.Major, req.Minor))))
					errno = c.open(node, map[Access]string{Read: "r", Write: "w", ReadWrite: "rw"}[req.Access])
				}
				if got := errno != unix.EPERM; got != want {
					t.Errorf("static %v grants %v request %+v: kernel allowed=%v (errno %v), Evaluate %v",
						static, grants, req, got, errno, want)
				}
				checked++
				if want {
					allowed++
				}
			}
		})
	}
	t.Logf("%d kernel decisions checked, %d allowed", checked, allowed)
	if allowed == 0 || allowed == checked {
		t.Fatalf("sample is one-sided (%d of %d allowed): it proves nothing", allowed, checked)
	}
}

// TestKernelHasNoTestRun records why FuzzCompile uses an interpreter: BPF_PROG_TEST_RUN is not
// implemented for cgroup device programs. If a kernel adds it, this fails: switch the oracle.
func TestKernelHasNoTestRun(t *testing.T) {
	prereq.Root(t)
	insns, err := Compile(Baseline(BaselineOptions{}), CompileOptions{})
	must(t, err)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.CGroupDevice, License: license, Instructions: insns})
	must(t, err)
	defer prog.Close()
	_, err = prog.Run(&ebpf.RunOptions{Context: make([]byte, 12)})
	if !errors.Is(err, ebpf.ErrNotSupported) {
		t.Fatalf("BPF_PROG_TEST_RUN on a cgroup device program = %v; it is supported now: use it as the oracle", err)
	}
}

// TestProbeThisHost: Probe agrees with the facts it is built from.
func TestProbeThisHost(t *testing.T) {
	prereq.Root(t)
	c := Probe()
	t.Logf("%+v", c)
	if c.KVM != accel.Probe() {
		t.Errorf("KVM decision %+v, accel.Probe says %+v", c.KVM, accel.Probe())
	}
	mnt, err := FindCgroup2Mount()
	if err != nil || c.Cgroup2 != mnt {
		t.Errorf("Cgroup2 %q, FindCgroup2Mount %q, %v", c.Cgroup2, mnt, err)
	}
	if !c.BPFDevice {
		t.Errorf("BPFDevice false as root on a BPF-capable kernel: %v", c.Notes)
	}
	for _, d := range []struct {
		path string
		got  bool
	}{{"/dev/net/tun", c.Tun}, {"/dev/vhost-net", c.VhostNet}} {
		_, err := os.Stat(d.path)
		if exists := err == nil; exists != d.got {
			t.Errorf("%s: probe says %v, stat says exists=%v", d.path, d.got, exists)
		}
	}
}

// TestKernelConstants: the literal values the pure code uses are the kernel's.
func TestKernelConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		ours, uap uint32
	}{
		{"BPF_DEVCG_DEV_BLOCK", devBlock, unix.BPF_DEVCG_DEV_BLOCK},
		{"BPF_DEVCG_DEV_CHAR", devChar, unix.BPF_DEVCG_DEV_CHAR},
		{"BPF_DEVCG_ACC_MKNOD", uint32(Mknod), unix.BPF_DEVCG_ACC_MKNOD},
		{"BPF_DEVCG_ACC_READ", uint32(Read), unix.BPF_DEVCG_ACC_READ},
		{"BPF_DEVCG_ACC_WRITE", uint32(Write), unix.BPF_DEVCG_ACC_WRITE},
	} {
		if c.ours != c.uap {
			t.Errorf("%s: ours %d, uapi %d", c.name, c.ours, c.uap)
		}
	}
}
