package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/test/figure"
	"github.com/vmlet/vmlet/test/leakaudit"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// faultTally counts TestNodeFaults' rows for its summary line.
type faultTally struct {
	injected, handled, lost, leaks atomic.Int64
}

// TestNodeFaults injects node and storage faults, one row each, on real kernel objects with the
// real API server and QEMU, and checks each ends with the VMI's phase and conditions naming
// the cause (or the VMI running, where the fault is repaired), running VMs untouched and
// nothing left on the node (test/leakaudit). It prints
// "node faults: N injected, N handled with a reason, 0 VMs lost, 0 leaks".
func TestNodeFaults(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	var tally faultTally
	rows := []struct {
		name string
		run  func(t *testing.T, tally *faultTally)
	}{
		{"state folder full during VMI start", faultFullAtStart},
		{"state folder full during disk hotplug", faultFullAtHotplug},
		{"truncated image cache entry", faultCorruptCache},
		{"launcher socket replaced", faultSocketReplaced},
		{"symlink planted where a disk is written", faultSymlinkDisk},
		{"symlink planted where a log is written", faultSymlinkLog},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			tally.injected.Add(1)
			row.run(t, &tally)
			if !t.Failed() {
				tally.handled.Add(1)
			}
		})
	}
	figure.Report(t, "node faults: %d injected, %d handled with a reason, %d VMs lost, %d leaks",
		tally.injected.Load(), tally.handled.Load(), tally.lost.Load(), tally.leaks.Load())
}

// settleAudit checks nothing of the row's VMs is left (leakaudit) and counts what is.
func settleAudit(t *testing.T, tally *faultTally, before *leakaudit.Snapshot) {
	t.Helper()
	rep := before.Settle(time.Minute)
	t.Logf("leaks: %s", rep)
	if n := rep.Total(); n > 0 {
		tally.leaks.Add(int64(n))
		t.Errorf("left on the node:\n%s", rep.Detail())
	}
}

// smallFS mounts a fresh ext4 filesystem of mib MiB with at most inodes inodes (a loop device
// over a file of the test's; no reserved blocks, so root fills it like anyone) and returns its
// mount point, which the launchers' user may pass through. It is unmounted at cleanup.
// Equivalent to: truncate -s MIB; mkfs.ext4 -m 0 -N INODES; mount -o loop.
func smallFS(t *testing.T, mib, inodes int) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, int64(mib)<<20); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
	}
	run("mkfs.ext4", "-q", "-F", "-m", "0", "-N", fmt.Sprint(inodes), img)
	dir := nodeDir(t)
	run("mount", "-o", "loop", img, dir)
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fillFS takes every free inode and block of the filesystem at dir (empty files until no inode
// is left, then the first of them holds the free space) and returns the function that gives them back.
func fillFS(t *testing.T, dir string) (free func()) {
	t.Helper()
	fill := filepath.Join(dir, "filler")
	if err := os.Mkdir(fill, 0o700); err != nil {
		t.Fatal(err)
	}
	free = func() {
		if err := os.RemoveAll(fill); err != nil {
			t.Errorf("free the filesystem: %v", err)
		}
	}
	// Inodes first: the filler folder's entries need blocks.
	for i := 0; ; i++ {
		g, err := os.Create(filepath.Join(fill, fmt.Sprint("inode-", i)))
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
		g.Close()
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(fill, "inode-0"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(st.Bavail) * st.Bsize; n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil && !errors.Is(err, unix.ENOSPC) {
			t.Fatal(err)
		}
	}
	// What fallocate left (metadata rounding): write until the filesystem says no.
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("filled %s: %d blocks, %d inodes free", dir, st.Bavail, st.Ffree)
	return free
}

// regularFiles lists the regular files below dir (none when it does not exist).
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return out
}

// prePull puts the test guest's kernel image into the image cache at dir, as an earlier VMI
// would have.
func prePull(t *testing.T, dir string) {
	t.Helper()
	c, err := oci.Open(oci.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pull(context.Background(), guestLayout(t), ""); err != nil {
		t.Fatal(err)
	}
}

// waitNotSynchronized waits for Synchronized=False with reason.
func waitNotSynchronized(t *testing.T, key client.ObjectKey, reason string, d time.Duration) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var vmi *vmletv1.VirtualMachineInstance
	eventually(t, d, key.Name+" Synchronized=False "+reason, func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		vmi = v
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == reason, summary(v)
	})
	return vmi
}

func deleteAndWait(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, client.ObjectKeyFromObject(v))
}

// spaceVMI is a VMI whose start writes to its volume folder: a NoCloud ISO and an emptyDisk.
func spaceVMI(name string) *vmletv1.VirtualMachineInstance {
	vmi := newVMI(name)
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
			CloudInitData: vmletv1.CloudInitData{UserData: "#cloud-config\n# space\n"}}}},
		{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}},
	}
	return vmi
}

// faultFullAtStart: the node's state folder (image cache and volume folders on one small ext4)
// is full when a VMI starts. The VMI waits, Synchronized=False InsufficientStorage, with a
// Warning event per try and no launcher, no files in its volume folder; the tries back off
// and never make it Failed; once space is back it runs, and so does the next VMI.
func faultFullAtStart(t *testing.T, tally *faultTally) {
	state := smallFS(t, 64, 512)
	images, volumes := filepath.Join(state, "images"), filepath.Join(state, "volumes")
	prePull(t, images)
	before := auditNode(t, volumes)
	a := startAgent(t, agentOptions{ImageCache: images, VolumeRoot: volumes,
		PullBackOff: 300 * time.Millisecond, PullBackOffMax: time.Second})
	defer a.stop(t)
	free := fillFS(t, state)

	vmi := spaceVMI("full-at-start")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	v := waitNotSynchronized(t, key, storage.ReasonNoSpace, time.Minute)
	c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	if !strings.Contains(c.Message, "out of space") || !strings.Contains(c.Message, "no space left on device") {
		t.Errorf("the condition does not say the node is out of space: %q", c.Message)
	}
	eventually(t, time.Minute, "3 tries, each with a Warning event", func() (bool, string) {
		n := len(a.events.times(vmi.UID, storage.ReasonNoSpace))
		return n >= 3, fmt.Sprintf("%d tries", n)
	})
	v = mustGetVMI(t, v)
	if v.Status.Phase == vmletv1.Failed || v.Status.Phase == vmletv1.Running {
		t.Errorf("phase %s while the node is full, want it waiting (Scheduled)", v.Status.Phase)
	}
	if _, err := a.runtime.State(string(vmi.UID)); err == nil {
		t.Error("a launcher was started for storage that could not be made")
	}
	if left := regularFiles(t, filepath.Join(volumes, string(vmi.UID))); len(left) > 0 {
		t.Errorf("half-made storage left in the volume folder: %v", left)
	}
	if left := regularFiles(t, filepath.Join(images, "tmp")); len(left) > 0 {
		t.Errorf("half-made images left in the cache: %v", left)
	}

	free()
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	t.Logf("space back: %s", summary(running))
	next := spaceVMI("full-at-start-next")
	if err := env.Client.Create(context.Background(), next); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, client.ObjectKeyFromObject(next), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	deleteAndWait(t, running)
	deleteAndWait(t, next)
	settleAudit(t, tally, before)
}

// faultFullAtHotplug: a running VMI hotplugs a claim whose disk.img must be made on a full
// filesystem. The volume waits (Pending, InsufficientStorage, a Warning event, the next try's
// time), the VMI keeps running untouched (same QEMU), and once space is back the disk is made
// and attached by that try, with nothing else happening to the VMI.
func faultFullAtHotplug(t *testing.T, tally *faultTally) {
	state := smallFS(t, 32, 256)
	claim := filepath.Join(state, "claims", "hot")
	if err := os.MkdirAll(claim, 0o755); err != nil {
		t.Fatal(err)
	}
	before := auditNode(t)
	a := startAgent(t, agentOptions{Claims: map[string]storage.Claim{"hot-claim": {Path: claim, CapacityBytes: 8 << 20}}})
	defer a.stop(t)
	vmi := newVMI("full-at-hotplug")
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	pid := running.Status.Launcher.PID
	free := fillFS(t, state)

	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume("hot", "hot-claim", true))
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: "hot", Serial: "hot"})
	})
	eventually(t, time.Minute, "hot volume Pending InsufficientStorage", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		s, _ := volumeStatus(v, "hot")
		// It says when it is tried again: nothing else need happen to the VMI for that.
		return s.Phase == vmletv1.VolumePending && s.Reason == storage.ReasonNoSpace && strings.Contains(s.Message, "next try in"), fmt.Sprintf("%+v", s)
	})
	waitEvent(t, running, storage.ReasonNoSpace)
	v := mustGetVMI(t, running)
	if v.Status.Phase != vmletv1.Running || v.Status.Launcher == nil || v.Status.Launcher.PID != pid || !alive(int(pid)) {
		t.Errorf("the running VMI was disturbed: %s, launcher %+v (was QEMU pid %d)", summary(v), v.Status.Launcher, pid)
	}
	if left := regularFiles(t, claim); len(left) > 0 {
		t.Errorf("half-made disk in the claim: %v", left)
	}

	free()
	waitVolumes(t, key, vmletv1.VolumeReady, "hot")
	waitSerial(t, consoleLog(running), testguest.MarkerDiskAdded+" ")
	if v := mustGetVMI(t, running); v.Status.Launcher == nil || v.Status.Launcher.PID != pid {
		tally.lost.Add(1)
		t.Errorf("the VM was restarted: launcher %+v, was QEMU pid %d", v.Status.Launcher, pid)
	}
	deleteAndWait(t, running)
	settleAudit(t, tally, before)
}

// faultCorruptCache: the image cache entry of the kernel image is damaged (its kernel file
// truncated, as a crash mid-write or a full disk would leave it). The next VMI does not boot
// the truncated kernel: the entry is unpacked again and the guest reaches its ready marker.
func faultCorruptCache(t *testing.T, tally *faultTally) {
	cache := nodeDir(t)
	prePull(t, cache)
	kernels, err := filepath.Glob(filepath.Join(cache, "images", "sha256-*", "rootfs", "vmlinuz"))
	if err != nil || len(kernels) != 1 {
		t.Fatalf("the cached kernel: %v (%v)", kernels, err)
	}
	fi, err := os.Stat(kernels[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(kernels[0], fi.Size()/3); err != nil {
		t.Fatal(err)
	}
	before := auditNode(t)
	a := startAgent(t, agentOptions{ImageCache: cache})
	defer a.stop(t)
	vmi := newVMI("corrupt-cache")
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	waitSerial(t, consoleLog(running), testguest.MarkerReady)
	if fi2, err := os.Stat(kernels[0]); err != nil || fi2.Size() != fi.Size() {
		t.Errorf("the cached kernel after the start: %v (%v), want %d bytes", fi2, err, fi.Size())
	}
	deleteAndWait(t, running)
	settleAudit(t, tally, before)
}

// faultSocketReplaced: while the agent is down, VMI a's launcher socket in its run folder is
// replaced by something else: a regular file, a socket another process listens on, a symlink
// to VMI b's launcher socket. The restarted agent refuses each (Synchronized=False
// LauncherSocketRefused, a Warning event) and does not drive b through a's record; both VMs
// keep running (same QEMU pids), and with the socket back a is Synchronized again.
func faultSocketReplaced(t *testing.T, tally *faultTally) {
	before := auditNode(t)
	start := func() *agent { return startAgent(t, agentOptions{}) }
	a := start()
	var vmis [2]*vmletv1.VirtualMachineInstance
	for i, name := range []string{"socket-a", "socket-b"} {
		v := newVMI(name)
		v.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		v.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
		if err := env.Client.Create(context.Background(), v); err != nil {
			t.Fatal(err)
		}
		vmis[i] = v
	}
	var pids [2]int64
	for i, v := range vmis {
		r := waitCondition(t, client.ObjectKeyFromObject(v), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
		pids[i] = r.Status.Launcher.PID
	}
	if rep, err := before.Diff(); err != nil || rep.Count(leakaudit.Processes) < 4 || rep.Count(leakaudit.Cgroups) < 2 || rep.Count(leakaudit.Files) == 0 {
		t.Fatalf("the audit does not see the running VMs: %s (%v)", rep, err)
	}
	sockA, sockB := a.runtime.Socket(string(vmis[0].UID)), a.runtime.Socket(string(vmis[1].UID))
	aside := sockA + ".real"
	variants := []struct {
		name  string
		plant func(t *testing.T) (undo func())
	}{
		{"regular file", func(t *testing.T) func() {
			if err := os.WriteFile(sockA, []byte("not a socket"), 0o600); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}},
		{"another listener", func(t *testing.T) func() {
			l, err := net.Listen("unix", sockA)
			if err != nil {
				t.Fatal(err)
			}
			return func() { l.Close() }
		}},
		{"symlink to another VM's socket", func(t *testing.T) func() {
			if err := os.Symlink(sockB, sockA); err != nil {
				t.Fatal(err)
			}
			return func() {}
		}},
	}
	for _, v := range variants {
		a.stop(t)
		if err := os.Rename(sockA, aside); err != nil {
			t.Fatal(err)
		}
		undo := v.plant(t)
		a = start()
		got := waitNotSynchronized(t, client.ObjectKeyFromObject(vmis[0]), string(vmistatus.ReasonLauncherSocketRefused), time.Minute)
		c := meta.FindStatusCondition(got.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		t.Logf("%s: %s", v.name, c.Message)
		waitEvent(t, vmis[0], string(vmistatus.ReasonLauncherSocketRefused))
		for i, vmi := range vmis {
			cur := mustGetVMI(t, vmi)
			if cur.Status.Launcher == nil || cur.Status.Launcher.PID != pids[i] || !alive(int(pids[i])) {
				tally.lost.Add(1)
				t.Errorf("%s: %s's VM was disturbed: launcher %+v, was QEMU pid %d", v.name, vmi.Name, cur.Status.Launcher, pids[i])
			}
		}
		if b := mustGetVMI(t, vmis[1]); !meta.IsStatusConditionTrue(b.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized) {
			t.Errorf("%s: the other VMI: %s", v.name, summary(b))
		}
		a.stop(t)
		undo()
		if err := os.Remove(sockA); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.Rename(aside, sockA); err != nil {
			t.Fatal(err)
		}
		a = start()
		waitCondition(t, client.ObjectKeyFromObject(vmis[0]), vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, time.Minute)
	}
	for _, v := range vmis {
		deleteAndWait(t, v)
	}
	a.stop(t)
	settleAudit(t, tally, before)
}
