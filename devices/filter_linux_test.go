package devices

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// TestFilterEnforces: a process in a cgroup carrying the baseline opens the baseline devices
// and gets EPERM for /dev/kvm, a loop device and mknod.
func TestFilterEnforces(t *testing.T) {
	kvmDev, _ := kvmNode(t)
	cg := newTestCgroup(t)
	loop, _, _ := loopDevice(t)
	if got := programsOn(t, cg.Path); len(got) != 0 {
		t.Fatalf("fresh cgroup carries programs %v", got)
	}
	f, err := Attach(cg.Path, Baseline(BaselineOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	onlyProgram(t, cg.Path)

	c := startChild(t, cg)
	node := filepath.Join(t.TempDir(), "null")
	for _, tc := range []struct {
		what string
		got  unix.Errno
		want unix.Errno
	}{
		{"open /dev/null rw", c.open("/dev/null", "rw"), 0},
		{"open /dev/zero r", c.open("/dev/zero", "r"), 0},
		{"open /dev/urandom r", c.open("/dev/urandom", "r"), 0},
		{"open /dev/full w", c.open("/dev/full", "w"), 0},
		{"open /dev/net/tun rw", c.open("/dev/net/tun", "rw"), 0},
		{"open /dev/kvm rw", c.open(kvmDev, "rw"), unix.EPERM},
		{"open /dev/kvm r", c.open(kvmDev, "r"), unix.EPERM},
		{"open loop r", c.open(loop, "r"), unix.EPERM},
		{"mknod c 1:3 without m", c.mknod(node, "c", 1, 3), unix.EPERM},
	} {
		expect(t, tc.what, tc.got, tc.want)
	}
}

// TestGrantRevokeAtOnce: a running process sees a grant on its next open and a revoke as
// EPERM on its next open, with no new program.
func TestGrantRevokeAtOnce(t *testing.T) {
	kvmDev, kvmOK := kvmNode(t)
	cg := newTestCgroup(t)
	loop, lmaj, lmin := loopDevice(t)
	f, err := Attach(cg.Path, Baseline(BaselineOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	id := onlyProgram(t, cg.Path)
	c := startChild(t, cg)
	node := filepath.Join(t.TempDir(), "null")
	disk := Allow(BlockDevice, int64(lmaj), int64(lmin), ReadWrite)
	kvm := Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)

	expect(t, "loop before grant", c.open(loop, "rw"), unix.EPERM)
	must(t, f.Grant(disk))
	expect(t, "loop after grant", c.open(loop, "rw"), 0)
	must(t, f.Revoke(disk))
	expect(t, "loop after revoke", c.open(loop, "r"), unix.EPERM)

	must(t, f.Grant(kvm))
	expect(t, "kvm after grant", c.open(kvmDev, "rw"), kvmOK)
	must(t, f.Revoke(Allow(CharDevice, MiscMajor, KVMMinor, Write)))
	expect(t, "kvm r after revoking w", c.open(kvmDev, "r"), kvmOK)
	expect(t, "kvm w after revoking w", c.open(kvmDev, "w"), unix.EPERM)
	must(t, f.Revoke(kvm))
	expect(t, "kvm r after revoke", c.open(kvmDev, "r"), unix.EPERM)

	expect(t, "mknod before grant", c.mknod(node, "c", 1, 3), unix.EPERM)
	must(t, f.Grant(Allow(CharDevice, 1, 3, Mknod)))
	expect(t, "mknod after grant", c.mknod(node, "c", 1, 3), 0)
	must(t, f.Revoke(Allow(CharDevice, 1, 3, Mknod)))

	// 'a' with a wildcard minor: one 'b' and one 'c' entry.
	all7 := Allow(AllDevices, int64(lmaj), Wildcard, Read)
	must(t, f.Grant(all7))
	expect(t, "loop r via a 7:*", c.open(loop, "r"), 0)
	expect(t, "loop w not granted", c.open(loop, "w"), unix.EPERM)
	grants, err := f.Grants()
	must(t, err)
	want := []Rule{Allow(BlockDevice, int64(lmaj), Wildcard, Read), Allow(CharDevice, int64(lmaj), Wildcard, Read)}
	if !slices.Equal(grants, want) {
		t.Errorf("Grants() = %v, want %v", grants, want)
	}
	must(t, f.Revoke(all7))
	expect(t, "loop after revoking a 7:*", c.open(loop, "r"), unix.EPERM)
	if grants, _ := f.Grants(); len(grants) != 0 {
		t.Errorf("grants left after revoking everything: %v", grants)
	}
	must(t, f.Revoke(kvm)) // revoking what is not granted is fine

	if err := f.Grant(Deny(CharDevice, 1, 3, Read)); !errors.Is(err, ErrGrantDeny) {
		t.Errorf("Grant(deny) = %v, want ErrGrantDeny", err)
	}
	if err := f.Grant(Allow('x', 1, 3, Read)); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("Grant(invalid) = %v, want ErrInvalidRule", err)
	}
	if got := onlyProgram(t, cg.Path); got != id {
		t.Errorf("program changed from %d to %d: grants must not replace it", id, got)
	}
}

// TestRecoverAfterAttacherExits: a helper process attaches and grants, then exits; the filter
// still holds, and this process recovers it and changes it.
func TestRecoverAfterAttacherExits(t *testing.T) {
	kvmDev, kvmOK := kvmNode(t)
	cg := newTestCgroup(t)
	loop, lmaj, lmin := loopDevice(t)
	if _, err := Recover(cg.Path); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Recover on a bare cgroup = %v, want ErrNotAttached", err)
	}
	baseline := Baseline(BaselineOptions{})
	kvm := Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)
	var rules []string
	for _, r := range baseline {
		rules = append(rules, r.String())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=attach", "VMLET_DEVICES_CGROUP="+cg.Path,
		"VMLET_DEVICES_RULES="+strings.Join(rules, ";"), "VMLET_DEVICES_GRANTS="+kvm.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output() // returns after the attacher exited
	if err != nil {
		t.Fatalf("attacher: %v", err)
	}
	attachedID, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 32)
	if err != nil {
		t.Fatalf("attacher printed %q", out)
	}
	if got := onlyProgram(t, cg.Path); got != ebpf.ProgramID(attachedID) {
		t.Fatalf("cgroup carries program %d, attacher attached %d", got, attachedID)
	}

	c := startChild(t, cg)
	expect(t, "kvm granted by the exited attacher", c.open(kvmDev, "rw"), kvmOK)
	expect(t, "loop not granted", c.open(loop, "r"), unix.EPERM)
	expect(t, "null in baseline", c.open("/dev/null", "rw"), 0)

	f, err := Recover(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if id, err := f.ProgramID(); err != nil || id != ebpf.ProgramID(attachedID) {
		t.Fatalf("recovered program %d (%v), want %d", id, err, attachedID)
	}
	got, err := f.Rules()
	must(t, err)
	if want := append(Canonical(baseline), kvm); !slices.Equal(got, want) {
		t.Fatalf("recovered rules\n%v\nwant\n%v", got, want)
	}
	must(t, f.Grant(Allow(BlockDevice, int64(lmaj), int64(lmin), Read)))
	expect(t, "loop after grant by the recovering process", c.open(loop, "r"), 0)
	must(t, f.Revoke(kvm))
	expect(t, "kvm after revoke by the recovering process", c.open(kvmDev, "rw"), unix.EPERM)
	onlyProgram(t, cg.Path)
}

// TestAttachIdempotentAndReplace: the same rules keep the program; other rules replace it in
// place, keeping grants; exactly one program throughout.
func TestAttachIdempotentAndReplace(t *testing.T) {
	kvmDev, kvmOK := kvmNode(t)
	cg := newTestCgroup(t)
	loop, lmaj, lmin := loopDevice(t)
	a := Baseline(BaselineOptions{})
	b := Baseline(BaselineOptions{KVM: true})

	f1, err := Attach(cg.Path, a)
	must(t, err)
	t.Cleanup(func() { f1.Close() })
	id1 := onlyProgram(t, cg.Path)
	must(t, f1.Grant(Allow(BlockDevice, int64(lmaj), int64(lmin), ReadWrite)))

	rev := slices.Clone(a) // order must not matter
	slices.Reverse(rev)
	f2, err := Attach(cg.Path, rev)
	must(t, err)
	t.Cleanup(func() { f2.Close() })
	if id := onlyProgram(t, cg.Path); id != id1 {
		t.Fatalf("re-attaching the same rules replaced program %d with %d", id1, id)
	}

	c := startChild(t, cg)
	expect(t, "kvm under a", c.open(kvmDev, "rw"), unix.EPERM)
	f3, err := Attach(cg.Path, b)
	must(t, err)
	t.Cleanup(func() { f3.Close() })
	id3 := onlyProgram(t, cg.Path)
	if id3 == id1 {
		t.Fatal("new rules kept the old program")
	}
	expect(t, "kvm under b", c.open(kvmDev, "rw"), kvmOK)
	expect(t, "loop grant survives the replace", c.open(loop, "rw"), 0)
	if ok, err := f1.Attached(); err != nil || ok {
		t.Errorf("old filter Attached() = %v, %v; want false", ok, err)
	}
	// A stale Filter still changes the shared grants map.
	must(t, f1.Revoke(Allow(BlockDevice, int64(lmaj), int64(lmin), ReadWrite)))
	expect(t, "loop revoked through the stale filter", c.open(loop, "rw"), unix.EPERM)

	f4, err := Attach(cg.Path, a)
	must(t, err)
	t.Cleanup(func() { f4.Close() })
	onlyProgram(t, cg.Path)
	expect(t, "kvm back under a", c.open(kvmDev, "rw"), unix.EPERM)

	must(t, f4.Detach())
	if ids := programsOn(t, cg.Path); len(ids) != 0 {
		t.Fatalf("programs %v left after Detach", ids)
	}
	if _, err := Recover(cg.Path); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Recover after Detach = %v, want ErrNotAttached", err)
	}
	if err := f4.Detach(); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("Detach of a detached (closed) filter = %v, want os.ErrClosed", err)
	}
}

// TestReplaceNeverUnfiltered: while the program is replaced back and forth, a process opening
// a device both rule sets allow (through a grant) is never refused (EPERM) and one both deny
// always is: no moment without a filter, and no moment where the grants are missing.
func TestReplaceNeverUnfiltered(t *testing.T) {
	kvmDev, _ := kvmNode(t)
	cg := newTestCgroup(t)
	a := Baseline(BaselineOptions{})
	b := append(Baseline(BaselineOptions{}), Allow(BlockDevice, 7, Wildcard, Read))
	f, err := Attach(cg.Path, a)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	must(t, f.Grant(Allow(CharDevice, MiscMajor, KVMMinor, ReadWrite)))
	c := startChild(t, cg)
	// kvm: allowed by the grant only; /dev/loop-control (10:237): denied by a and b.
	if got := c.do("hammer " + kvmDev + " /dev/loop-control"); got != "started" {
		t.Fatalf("hammer: %q", got)
	}
	const swaps = 200
	for i := range swaps {
		rules := a
		if i%2 == 0 {
			rules = b
		}
		g, err := Attach(cg.Path, rules)
		must(t, err)
		g.Close()
	}
	res := strings.Fields(c.do("stop"))
	if len(res) != 3 {
		t.Fatalf("hammer result %v", res)
	}
	t.Logf("%s open rounds during %d replaces", res[0], swaps)
	if res[1] != "0" || res[2] != "0" {
		t.Fatalf("during replaces: granted %s refused %s times, denied /dev/loop-control not refused %s times", kvmDev, res[1], res[2])
	}
	onlyProgram(t, cg.Path)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
