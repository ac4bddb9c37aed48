package controllers_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/figure"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/procstatus"
)

// secVM is one running VM of TestSecurity as the host sees it.
type secVM struct {
	uid, cgroup       string
	launcherPid, qemu int
	paths             launcher.Paths
	volume, ownDisk   string
	key               client.ObjectKey
	running           *vmletv1.VirtualMachineInstance
}

// secChecks counts TestSecurity's checks and the violations among them.
type secChecks struct {
	t                 *testing.T
	checks, violation int
}

func (c *secChecks) check(ok bool, format string, args ...any) {
	c.t.Helper()
	c.checks++
	if !ok {
		c.violation++
		c.t.Errorf("violation: "+format, args...)
	}
}

// TestSecurity: two running VMs (a NIC, an emptyDisk, the default display each), checked from
// the host and from a probe process the test starts inside VM A's launcher cgroup:
//   - the run folder, its subfolders and every socket in it (QMP, QGA, the launcher's gRPC,
//     console, VNC, the debug QMP, the tap hand-over) are the launcher user's, with no group or
//     other permission; the agent's own files there are root's and 0600; nothing is a symlink;
//     the run and volume roots let others through but not list or write;
//   - the volume folder and its disks/ and boot/ are the launcher user's 0700, the disks 0600;
//     the kernel and initrd (links into the shared cache) are root's and not writable by others,
//     the agent's state file root's 0600;
//   - launcher and QEMU: the launcher user, no supplementary group, no capability in any set,
//     no_new_privs, QEMU under seccomp; both in the VM's own cgroup;
//   - device program: from A's cgroup, even as root, a block device (a root 0600 node of loop0
//     that the test makes, so that no other test's chown of /dev/loop0 changes it), KVM's
//     node (TCG: not granted; made by the test where the kvm module is not loaded), /dev/kmsg and /dev/console open EPERM, while the same
//     opens outside it succeed and A's granted devices (null, urandom, net/tun) open;
//     as A's user, a 0644 node of loop0 (so only the program stops it) is EPERM and /dev/net/tun
//     (the way to B's tap) EACCES, A's own disk opens read-write and A's sockets connect.
//
// All launchers share one uid (107, KubeVirt's qemu user), and local mode gives them no mount
// or PID namespace and (without SELinux) no label: from A's cgroup B's disk opens and B's
// sockets connect, and B's QEMU can be signalled. The test measures these and prints them as
// exposures next to the summary line; they are not counted as violations (README, Not yet).
func TestSecurity(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	ctx := context.Background()
	start := time.Now()

	var vms []*secVM
	for _, name := range []string{"sec-a", "sec-b"} {
		vmi := newVMI(name)
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, vmletv1.Volume{Name: "scratch",
			VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}})
		if err := env.Client.Create(ctx, vmi); err != nil {
			t.Fatal(err)
		}
		uid := string(vmi.UID)
		vms = append(vms, &secVM{uid: uid, key: client.ObjectKeyFromObject(vmi),
			cgroup: filepath.Join(cgroupParent, "vmlet-"+uid), paths: launcher.Paths{Root: filepath.Join(runRoot, uid)},
			volume: filepath.Join(volumeRoot, uid), ownDisk: filepath.Join(volumeRoot, uid, "disks", "scratch.qcow2")})
	}
	for _, vm := range vms {
		vm.running = waitCondition(t, vm.key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 3*time.Minute)
		st, err := a.runtime.State(vm.uid)
		if err != nil {
			t.Fatal(err)
		}
		vm.launcherPid, vm.qemu = st.Pid, int(vm.running.Status.Launcher.PID)
	}
	c := &secChecks{t: t}
	u := launcherUser
	for _, vm := range vms {
		checkRunFolder(c, vm, u)
		checkVolumeFolder(c, vm, u)
		checkProcesses(c, vm, u)
	}
	for _, root := range []string{runRoot, volumeRoot} {
		fi, err := os.Stat(root)
		c.check(err == nil && fi.Mode().Perm()&0o006 == 0, "%s: %v %v, want no listing or writing by others", root, modeOf(fi), err)
	}
	exposures := checkIsolation(c, vms[0], vms[1], u, a.r.KVM)

	for _, vm := range vms {
		if err := env.Client.Delete(ctx, vm.running); err != nil {
			t.Fatal(err)
		}
	}
	for _, vm := range vms {
		waitDeleted(t, vm.key)
		assertNothingLeft(t, vm.uid, vm.launcherPid, vm.qemu)
	}
	figure.Report(t, "security: %d VMs, %d checks, %d violations; shared uid %d exposures: %s (%.0f s)",
		len(vms), c.checks, c.violation, u.UID, strings.Join(exposures, ", "), time.Since(start).Seconds())
}

// checkRunFolder: everything in the run folder is private to the launcher user (sockets,
// folders, its logs) or to root (the agent's pid, exit and log files); no symlink.
func checkRunFolder(c *secChecks, vm *secVM, u process.User) {
	c.t.Helper()
	agentFiles := []string{"launcher.pid", "launcher.exit", "launcher.log"}
	sockets := map[string]bool{}
	err := walkLstat(vm.paths.Root, func(p, rel string, fi fs.FileInfo, st *syscall.Stat_t) {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			c.check(false, "%s: a symlink in the run folder", p)
		case fi.IsDir():
			c.check(fi.Mode().Perm() == 0o700 && st.Uid == u.UID && st.Gid == u.GID,
				"run folder %s: %v %d:%d, want drwx------ %s", rel, fi.Mode(), st.Uid, st.Gid, u)
		case fi.Mode()&fs.ModeSocket != 0:
			sockets[p] = true
			c.check(fi.Mode().Perm()&0o077 == 0 && st.Uid == u.UID, "socket %s: %v owner %d, want 0600 or stricter, %d's", rel, fi.Mode(), st.Uid, u.UID)
		case slices.Contains(agentFiles, rel):
			c.check(fi.Mode().Perm() == 0o600 && st.Uid == 0, "agent file %s: %v owner %d, want root's 0600", rel, fi.Mode(), st.Uid)
		default:
			c.check(fi.Mode().Perm()&0o077 == 0 && st.Uid == u.UID, "%s: %v owner %d, want no group/other access, %d's", rel, fi.Mode(), st.Uid, u.UID)
		}
	})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, want := range []string{vm.paths.QMPSocket(), vm.paths.AgentSocket(), vm.paths.ReadySocket(), vm.paths.ConsoleSocket(),
		vm.paths.VNCSocket(), vm.paths.DebugSocket(), vm.paths.TapSocket()} {
		c.check(sockets[want], "socket %s missing (have %v)", want, sockets)
	}
}

// checkVolumeFolder: the VM folder and its folders are the user's 0700, the files the VM was
// given 0600; the boot files (hard links into the shared cache) are root's, not writable.
func checkVolumeFolder(c *secChecks, vm *secVM, u process.User) {
	c.t.Helper()
	err := walkLstat(vm.volume, func(p, rel string, fi fs.FileInfo, st *syscall.Stat_t) {
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			c.check(false, "%s: a symlink in the volume folder", p)
		case fi.IsDir():
			c.check(fi.Mode().Perm() == 0o700 && st.Uid == u.UID && st.Gid == u.GID,
				"volume folder %s: %v %d:%d, want drwx------ %s", rel, fi.Mode(), st.Uid, st.Gid, u)
		case rel == ".vmlet-storage.json": // the agent's
			c.check(fi.Mode().Perm() == 0o600 && st.Uid == 0, "agent file %s: %v owner %d, want root's 0600", rel, fi.Mode(), st.Uid)
		case filepath.Dir(rel) == "boot":
			c.check(st.Uid == 0 && fi.Mode().Perm()&0o022 == 0, "boot file %s: %v owner %d, want root's, not writable by others", rel, fi.Mode(), st.Uid)
		default:
			c.check(fi.Mode().Perm() == 0o600 && st.Uid == u.UID && st.Gid == u.GID,
				"disk %s: %v %d:%d, want -rw------- %s", rel, fi.Mode(), st.Uid, st.Gid, u)
		}
	})
	if err != nil {
		c.t.Fatal(err)
	}
	_, err = os.Stat(vm.ownDisk)
	c.check(err == nil, "emptyDisk %s: %v", vm.ownDisk, err)
}

// checkProcesses: launcher and QEMU run as u with no capability and no_new_privs, QEMU under
// seccomp, both in the VM's own cgroup (where its device program applies).
func checkProcesses(c *secChecks, vm *secVM, u process.User) {
	c.t.Helper()
	procs, err := (&devices.Cgroup{Path: vm.cgroup}).Procs()
	if err != nil {
		c.t.Fatal(err)
	}
	for name, pid := range map[string]int{"launcher": vm.launcherPid, "qemu": vm.qemu} {
		ps, err := procstatus.Read(pid)
		if err != nil {
			c.t.Fatal(err)
		}
		bad := ps.Unprivileged(u.UID, u.GID)
		c.check(len(bad) == 0, "%s (pid %d): %v", name, pid, bad)
		c.check(slices.Contains(procs, pid), "%s (pid %d) not in its cgroup %s (%v)", name, pid, vm.cgroup, procs)
		if name == "qemu" {
			c.check(ps.Seccomp == 2, "qemu Seccomp=%d, want 2 (filter)", ps.Seccomp)
		}
	}
}

// checkIsolation runs probes from A's cgroup (as root: the device program alone; as A's user:
// program and file permissions) and outside it (controls). It returns the exposures: what
// A's user reaches of B because both VMs share one uid.
func checkIsolation(c *secChecks, vmA, vmB *secVM, u process.User, kvm bool) []string {
	c.t.Helper()
	blk, blkOpen := blockNode(c.t, 0o600), blockNode(c.t, 0o644)
	denied := []string{blk, "/dev/kmsg", "/dev/console"}
	kvmDev, kvmControl := "", ""
	if !kvm {
		kvmDev, kvmControl = kvmNode(c.t)
		denied = append(denied, kvmDev)
	}
	granted := []string{"/dev/null", "/dev/urandom", "/dev/net/tun"}
	var ops []probeOp
	for _, p := range append(slices.Clone(denied), granted...) {
		ops = append(ops, probeOp{Kind: "read", Path: p})
	}
	outside := probe(c.t, "", 0, 0, ops)
	inside := probe(c.t, vmA.cgroup, 0, 0, ops)
	for i, op := range ops {
		if op.Path == kvmDev {
			c.check(outside[i] == kvmControl, "control: root outside any VM opens %s: %s, want %s", op.Path, outside[i], orOK(kvmControl))
		} else {
			c.check(outside[i] == "", "control: root outside any VM opens %s: %s, want success", op.Path, outside[i])
		}
		if i < len(denied) {
			c.check(inside[i] == "EPERM", "root in A's cgroup opens %s: %q, want EPERM (device program)", op.Path, inside[i])
		} else {
			c.check(inside[i] == "", "root in A's cgroup opens granted %s: %s, want success", op.Path, inside[i])
		}
	}

	asUser := []struct {
		op   probeOp
		want string
	}{
		{probeOp{Kind: "read", Path: blkOpen}, "EPERM"},          // 0644: only the device program stops it
		{probeOp{Kind: "write", Path: "/dev/net/tun"}, "EACCES"}, // root's 0600: no way to B's (or any) tap
		{probeOp{Kind: "write", Path: "/dev/null"}, ""},
		{probeOp{Kind: "read", Path: "/dev/urandom"}, ""},
		{probeOp{Kind: "write", Path: vmA.ownDisk}, ""},
		{probeOp{Kind: "connect", Path: vmA.paths.ReadySocket()}, ""},
		{probeOp{Kind: "connect", Path: vmA.paths.VNCSocket()}, ""},
		{probeOp{Kind: "read", Path: filepath.Join(vmA.paths.Root, "launcher.pid")}, "EACCES"}, // the agent's
		{probeOp{Kind: "read", Path: blk}, "EACCES"},                                           // root's 0600 block device
	}
	ops = ops[:0]
	for _, r := range asUser {
		ops = append(ops, r.op)
	}
	userOutside := probe(c.t, "", u.UID, u.GID, ops[:1])
	c.check(userOutside[0] == "", "control: %s outside any VM opens %s: %s, want success (0644)", u, blkOpen, userOutside[0])
	got := probe(c.t, vmA.cgroup, u.UID, u.GID, ops)
	for i, r := range asUser {
		c.check(got[i] == r.want, "%s in A's cgroup: %s %s: %q, want %q", u, r.op.Kind, r.op.Path, got[i], orOK(r.want))
	}

	// What A's user reaches of B through the shared uid: measured, reported, not asserted.
	crossed := []struct {
		what string
		op   probeOp
	}{
		{"B's disk (rw)", probeOp{Kind: "write", Path: vmB.ownDisk}},
		{"B's QMP", probeOp{Kind: "connect", Path: vmB.paths.QMPSocket()}},
		{"B's debug QMP", probeOp{Kind: "connect", Path: vmB.paths.DebugSocket()}},
		{"B's QGA", probeOp{Kind: "connect", Path: vmB.paths.AgentSocket()}},
		{"B's launcher", probeOp{Kind: "connect", Path: vmB.paths.ReadySocket()}},
		{"B's console", probeOp{Kind: "connect", Path: vmB.paths.ConsoleSocket()}},
		{"B's VNC", probeOp{Kind: "connect", Path: vmB.paths.VNCSocket()}},
		{"signal B's QEMU", probeOp{Kind: "signal", Pid: vmB.qemu}},
	}
	ops = ops[:0]
	for _, x := range crossed {
		ops = append(ops, x.op)
	}
	var exposures []string
	for i, res := range probe(c.t, vmA.cgroup, u.UID, u.GID, ops) {
		if res == "" {
			exposures = append(exposures, crossed[i].what)
		}
		c.t.Logf("from A's cgroup as %s: %s: %s", u, crossed[i].what, orOK(res))
	}
	if len(exposures) == 0 {
		exposures = []string{"none"}
	}
	return exposures
}

// walkLstat calls f for root and everything below it, with each entry's own (lstat) info.
func walkLstat(root string, f func(path, rel string, fi fs.FileInfo, st *syscall.Stat_t)) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		f(p, rel, fi, fi.Sys().(*syscall.Stat_t))
		return nil
	})
}

func orOK(errno string) string {
	if errno == "" {
		return "ok"
	}
	return errno
}

func modeOf(fi fs.FileInfo) string {
	if fi == nil {
		return "?"
	}
	return fi.Mode().String()
}

// blockNode makes a block device node of loop0 (7:0), root's with mode perm, in a folder others
// may pass through but not list. The test makes its own nodes rather than use /dev/loop0,
// whose owner other tests change (a VM on a loop device gets it for good, as in KubeVirt).
// The device program judges by type and numbers, so these are loop0 to it; a node of
// 0644 is one only the program keeps a user from (the loop driver checks no privilege).
// Equivalent to: mknod -m PERM DIR/loop0-PERM b 7 0.
// kvmNode is KVM's device node (misc 10:232) for the probes, and what an open of it outside
// any VM gives: /dev/kvm and success where the kvm module made it; else a root 0600 node of
// that number made for the test and ENODEV (no driver serves it; the device program decides
// before the driver, so from A's cgroup it is EPERM either way).
func kvmNode(t *testing.T) (string, string) {
	t.Helper()
	if _, err := os.Stat("/dev/kvm"); err == nil {
		return "/dev/kvm", ""
	}
	p := filepath.Join(filepath.Dir(blockNode(t, 0o600)), "kvm")
	if err := unix.Mknod(p, unix.S_IFCHR|0o600, int(unix.Mkdev(devices.MiscMajor, devices.KVMMinor))); err != nil {
		t.Fatal(err)
	}
	return p, "ENODEV"
}

func blockNode(t *testing.T, perm os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	p := filepath.Join(dir, fmt.Sprintf("loop0-%o", perm))
	if err := unix.Mknod(p, unix.S_IFBLK|uint32(perm), int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}
