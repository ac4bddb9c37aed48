package devices

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// attachStandIn attaches a program compiled by us from rules without grants, under another
// name, the way runc does (BPF_F_ALLOW_MULTI), standing in for runc's program.
func attachStandIn(t *testing.T, cgroupPath, name string, rules []Rule) ebpf.ProgramID {
	t.Helper()
	insns, err := Compile(rules, CompileOptions{})
	must(t, err)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: name, Type: ebpf.CGroupDevice, License: license, Instructions: insns})
	must(t, err)
	defer prog.Close() // the attachment keeps it
	cg, err := openCgroup(cgroupPath)
	must(t, err)
	defer cg.Close()
	must(t, attachProgram(cg, prog, nil))
	info, err := prog.Info()
	must(t, err)
	id, _ := info.ID()
	return id
}

// TestReplaceKeepingRunc: a cgroup carrying runc's default program; Attach refuses to stack
// on it; ReplaceKeeping swaps it for ours; runc's rules still hold, our rules and grants work,
// and exactly one program remains.
func TestReplaceKeepingRunc(t *testing.T) {
	kvmDev, kvmOK := kvmNode(t)
	cg := newTestCgroup(t)
	loop, lmaj, lmin := loopDevice(t)
	runcID := attachStandIn(t, cg.Path, "runc_standin", RuncDefaultRules())
	c := startChild(t, cg)
	dir := t.TempDir()
	expect(t, "runc: null", c.open("/dev/null", "rw"), 0)
	expect(t, "runc: kvm", c.open(kvmDev, "rw"), unix.EPERM)

	_, err := Attach(cg.Path, Baseline(BaselineOptions{KVM: true}))
	if !errors.Is(err, ErrForeignProgram) {
		t.Fatalf("Attach over runc's program = %v, want ErrForeignProgram", err)
	}
	if id := onlyProgram(t, cg.Path); id != runcID {
		t.Fatalf("failed Attach changed the cgroup: program %d, want %d", id, runcID)
	}
	expect(t, "after refused attach: kvm", c.open(kvmDev, "rw"), unix.EPERM)

	f, err := ReplaceKeeping(cg.Path, RuncDefaultRules(), []Rule{Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)})
	must(t, err)
	t.Cleanup(func() { f.Close() })
	ours, err := f.ProgramID()
	must(t, err)
	if id := onlyProgram(t, cg.Path); id != ours || id == runcID {
		t.Fatalf("cgroup carries %d, want our %d replacing runc's %d", id, ours, runcID)
	}
	for _, tc := range []struct {
		what string
		got  unix.Errno
		want unix.Errno
	}{
		{"runc rule: null rw", c.open("/dev/null", "rw"), 0},
		{"runc rule: tun", c.open("/dev/net/tun", "rw"), 0},
		{"runc rule: mknod any char", c.mknod(filepath.Join(dir, "n1"), "c", 1, 3), 0},
		{"runc rule: mknod any block", c.mknod(filepath.Join(dir, "n2"), "b", lmaj, lmin), 0},
		{"our rule: kvm", c.open(kvmDev, "rw"), kvmOK},
		{"neither: loop", c.open(loop, "r"), unix.EPERM},
	} {
		expect(t, tc.what, tc.got, tc.want)
	}
	must(t, f.Grant(Allow(BlockDevice, int64(lmaj), int64(lmin), ReadWrite)))
	expect(t, "our grant: loop", c.open(loop, "rw"), 0)
	want := Canonical(append(RuncDefaultRules(), Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)))
	if !slices.Equal(f.Static(), want) {
		t.Errorf("static rules %v, want %v", f.Static(), want)
	}

	// Idempotent: the same call again keeps our program.
	g, err := ReplaceKeeping(cg.Path, RuncDefaultRules(), []Rule{Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)})
	must(t, err)
	g.Close()
	if id := onlyProgram(t, cg.Path); id != ours {
		t.Errorf("repeated ReplaceKeeping replaced %d with %d", ours, id)
	}
}

// TestReplaceKeepingRemovesExtras: with two foreign programs (runc's and systemd's, say), one is
// replaced and the other detached: exactly one program remains.
func TestReplaceKeepingRemovesExtras(t *testing.T) {
	kvmDev, _ := kvmNode(t)
	cg := newTestCgroup(t)
	attachStandIn(t, cg.Path, "runc_standin", RuncDefaultRules())
	attachStandIn(t, cg.Path, "other_standin", []Rule{Allow(AllDevices, Wildcard, Wildcard, All)})
	if n := len(programsOn(t, cg.Path)); n != 2 {
		t.Fatalf("set-up: %d programs", n)
	}
	f, err := ReplaceKeeping(cg.Path, RuncDefaultRules(), nil)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	ours, err := f.ProgramID()
	must(t, err)
	if id := onlyProgram(t, cg.Path); id != ours {
		t.Fatalf("remaining program %d, want ours %d", id, ours)
	}
	c := startChild(t, cg)
	expect(t, "null", c.open("/dev/null", "rw"), 0)
	expect(t, "kvm", c.open(kvmDev, "rw"), unix.EPERM)
}
