package controllers_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/test/testguest"
)

// Symlink rows: the VM folder (volumes/<uid>) and the run folder (run/<uid>) belong to the
// launchers' user (107) once the VM runs, and every launcher shares it, so any process of that
// user may plant a symlink at a name vmlet writes next. Each variant points it at a file that
// must not be touched (a root-owned canary outside every VM folder, or another VM's disk),
// triggers the write at a deterministic moment, and checks the canary kept its content, size,
// owner and mode and that nothing opened it at all (inotify).

// fileRecord is what must not change of a file: its content's hash, size, owner and mode.
type fileRecord struct {
	path string
	sum  [32]byte
	size int64
	uid  uint32
	gid  uint32
	mode uint32
}

func recordFile(t *testing.T, path string) fileRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fileRecord{path: path, sum: sha256.Sum256(b), size: st.Size, uid: st.Uid, gid: st.Gid, mode: st.Mode}
}

// check reports any change of the file since it was recorded.
func (r fileRecord) check(t *testing.T, what string) {
	t.Helper()
	now := recordFile(t, r.path)
	if now != r {
		t.Errorf("%s: %s changed: size %d → %d, owner %d:%d → %d:%d, mode %o → %o, content same %v",
			what, r.path, r.size, now.size, r.uid, r.gid, now.uid, now.gid, r.mode, now.mode, r.sum == now.sum)
	}
}

// newCanary is a root-owned 0600 file outside every VM folder.
func newCanary(t *testing.T) fileRecord {
	t.Helper()
	p := filepath.Join(nodeDir(t), "canary")
	if err := os.WriteFile(p, []byte("root's canary: must never be opened by vmlet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return recordFile(t, p)
}

// fileWatch reports what was done to one file (inotify on its inode: opens through any
// path, a symlink included, count).
type fileWatch struct {
	fd   int
	path string
}

// Masks: everything for a canary nobody uses; opens and attribute changes for a disk whose
// QEMU reads and writes it through the descriptor it opened before the watch.
const (
	watchAll   = unix.IN_OPEN | unix.IN_ACCESS | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_CLOSE_WRITE
	watchOpens = unix.IN_OPEN | unix.IN_ATTRIB
)

// watchFile watches path (the file itself, not a link to it) until the test ends.
// Equivalent to: inotifywait -m -e open,access,modify,attrib PATH
func watchFile(t *testing.T, path string, mask uint32) *fileWatch {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, path, mask|unix.IN_DONT_FOLLOW); err != nil {
		t.Fatal(err)
	}
	return &fileWatch{fd: fd, path: path}
}

// none fails the test if anything was done to the file since the watch began.
func (w *fileWatch) none(t *testing.T, what string) {
	t.Helper()
	var seen []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			seen = append(seen, inotifyMask(ev.Mask))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	if len(seen) > 0 {
		t.Errorf("%s: %s was touched through the link: %v", what, w.path, seen)
	}
}

func inotifyMask(m uint32) string {
	var s []string
	for _, b := range []struct {
		bit  uint32
		name string
	}{{unix.IN_OPEN, "open"}, {unix.IN_ACCESS, "read"}, {unix.IN_MODIFY, "write"}, {unix.IN_ATTRIB, "attrib"}, {unix.IN_CLOSE_WRITE, "close-write"}} {
		if m&b.bit != 0 {
			s = append(s, b.name)
		}
	}
	return strings.Join(s, "|")
}

// plantLink puts a symlink to target at at, owned by the launchers' user as if one of their
// processes had planted it. Equivalent to: ln -s TARGET AT && chown -h 107:107 AT
func plantLink(t *testing.T, target, at string) {
	t.Helper()
	if err := os.Symlink(target, at); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(at, int(launcherUser.UID), int(launcherUser.GID)); err != nil {
		t.Fatal(err)
	}
}

func mustRename(t *testing.T, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// storageDone records which VMIs' storage operations ended (agentOptions.Trace), so that a
// watch on one VM's disk starts after the agent's own re-apply of that VM's storage (which
// opens it to hand it over) is over.
type storageDone struct {
	mu   sync.Mutex
	seen map[types.UID]int
}

func (s *storageDone) trace(uid types.UID, step string, _, _ time.Time) {
	if step != controllers.TraceStorage {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[types.UID]int{}
	}
	s.seen[uid]++
}

func (s *storageDone) count(uid types.UID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[uid]
}

// waitStorageApplied waits until the VMI's storage was applied more than n times in all.
func (s *storageDone) wait(t *testing.T, v *vmletv1.VirtualMachineInstance, n int) {
	t.Helper()
	eventually(t, time.Minute, v.Name+"'s storage applied again", func() (bool, string) {
		c := s.count(v.UID)
		return c > n, fmt.Sprintf("%d times", c)
	})
}

// waitNotSynchronizedAny waits for Synchronized=False, whatever its reason.
func waitNotSynchronizedAny(t *testing.T, key client.ObjectKey, d time.Duration) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	eventually(t, d, key.Name+" Synchronized=False", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		cond = meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return cond != nil && cond.Status == metav1.ConditionFalse, summary(v)
	})
	return cond
}

// waitVolumePending waits for the volume to be Pending with a reason.
func waitVolumePending(t *testing.T, key client.ObjectKey, name string) vmletv1.VolumeStatus {
	t.Helper()
	var s vmletv1.VolumeStatus
	eventually(t, time.Minute, name+" Pending with a reason", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		s, _ = volumeStatus(v, name)
		return s.Phase == vmletv1.VolumePending && s.Reason != "", fmt.Sprintf("%+v", v.Status.VolumeStatus)
	})
	return s
}

// waitAgentEvent waits for the agent a to record a Warning event with reason about v.
func waitAgentEvent(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance, reason string) {
	t.Helper()
	eventually(t, 10*time.Second, v.Name+" Warning event "+reason, func() (bool, string) {
		n := len(a.events.times(v.UID, reason))
		return n > 0, fmt.Sprintf("%d", n)
	})
}

// restartable is a test agent that the row stops and starts again; stop is idempotent, so
// that a deferred stop after the row's own does nothing.
type restartable struct {
	t    *testing.T
	opts agentOptions
	a    *agent
}

func (r *restartable) start() *agent { r.a = startAgent(r.t, r.opts); return r.a }

func (r *restartable) stop() {
	if r.a != nil {
		r.a.stop(r.t)
		r.a = nil
	}
}

// hotClaim adds a hotpluggable claim volume and its disk to the VMI.
func hotClaim(t *testing.T, key client.ObjectKey, name, claim string) {
	t.Helper()
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume(name, claim, true))
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: name, Serial: name})
	})
}

// faultSymlinkDisk: symlinks planted where the agent (root) writes a VM's disks and their
// record: VMI a's empty disk swapped for a link to a root canary before an agent restart
// (which applies a's storage again), the temporary name of a's storage state file and the
// state file itself (written at every disk hotplug) as links to the canary and to VMI b's
// disk, and a claim's disk.img (created at hotplug when missing, like a hostDisk
// DiskOrCreate) as a link out of the claim to the canary. Each is refused with
// HostPathNotAllowed and a Warning event (or the stale link replaced, for the temporary
// name), nothing is opened through the link, both VMs keep running, and each hotplug attaches
// once the link is gone.
func faultSymlinkDisk(t *testing.T, tally *faultTally) {
	claims := nodeDir(t)
	cl := map[string]storage.Claim{}
	for _, n := range []string{"sym-hot-1", "sym-hot-2", "sym-hot-3"} {
		dir := filepath.Join(claims, n)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cl[n] = storage.Claim{Path: dir, CapacityBytes: 8 << 20}
	}
	var applied storageDone
	opts := agentOptions{Claims: cl, Trace: applied.trace}
	before := auditNode(t)
	ag := &restartable{t: t, opts: opts}
	defer ag.stop()
	ag.start()
	var vmis [2]*vmletv1.VirtualMachineInstance
	var pids [2]int64
	for i, name := range []string{"symdisk-a", "symdisk-b"} {
		vmis[i] = spaceVMI(name)
		if err := env.Client.Create(context.Background(), vmis[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range vmis {
		r := waitCondition(t, client.ObjectKeyFromObject(v), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
		pids[i] = r.Status.Launcher.PID
	}
	va, vb := vmis[0], vmis[1]
	keyA := client.ObjectKeyFromObject(va)
	dirA := filepath.Join(volumeRoot, string(va.UID))
	diskA := filepath.Join(dirA, "disks", "scratch.qcow2")
	diskB := filepath.Join(volumeRoot, string(vb.UID), "disks", "scratch.qcow2")
	stateA := filepath.Join(dirA, ".vmlet-storage.json")
	can := newCanary(t)
	untouched := func(what string) {
		t.Helper()
		for i, v := range vmis {
			cur := mustGetVMI(t, v)
			if cur.Status.Launcher == nil || cur.Status.Launcher.PID != pids[i] || !alive(int(pids[i])) {
				tally.lost.Add(1)
				t.Errorf("%s: %s's VM was disturbed: launcher %+v, was QEMU pid %d", what, v.Name, cur.Status.Launcher, pids[i])
			}
		}
	}

	// 1. The agent restarts and applies a's storage again: a's empty disk is now a link to
	// the canary (the disk itself set aside; a's QEMU keeps it open).
	ag.stop()
	n := applied.count(vb.UID)
	mustRename(t, diskA, diskA+".aside")
	plantLink(t, can.path, diskA)
	w := watchFile(t, can.path, watchAll)
	a := ag.start()
	c := waitNotSynchronizedAny(t, keyA, time.Minute)
	t.Logf("empty disk → canary, agent restarted: %s: %s", c.Reason, c.Message)
	if c.Reason != storage.ReasonPathNotAllowed {
		t.Errorf("a's storage: reason %s, want %s", c.Reason, storage.ReasonPathNotAllowed)
	}
	waitAgentEvent(t, a, va, c.Reason)
	waitCondition(t, client.ObjectKeyFromObject(vb), vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, time.Minute)
	applied.wait(t, vb, n)
	w.none(t, "empty disk → canary")
	can.check(t, "empty disk → canary")
	untouched("empty disk → canary")
	ag.stop()
	mustRemove(t, diskA)
	mustRename(t, diskA+".aside", diskA)
	n = applied.count(vb.UID)
	a = ag.start()
	waitCondition(t, keyA, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, time.Minute)
	applied.wait(t, vb, n) // b's disk was opened by b's own re-apply: over before b's watch below

	// 2. A disk hotplug writes a's state file under a temporary name: a link to the canary
	// planted there is unlinked, not written through.
	tmp := stateA + ".tmp"
	plantLink(t, can.path, tmp)
	w = watchFile(t, can.path, watchAll)
	hotClaim(t, keyA, "hot1", "sym-hot-1")
	waitVolumes(t, keyA, vmletv1.VolumeReady, "hot1")
	w.none(t, "state file's temporary name → canary")
	can.check(t, "state file's temporary name → canary")
	if fi, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the planted link is still there: %v (%v)", fi, err)
	}
	if fi, err := os.Lstat(stateA); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("a's state file: %v (%v), want a regular file", fi, err)
	}
	untouched("state file's temporary name → canary")

	// 3. The state file itself (read at every hotplug) is a link to b's disk.
	mustRename(t, stateA, stateA+".aside")
	plantLink(t, diskB, stateA)
	recB := recordFile(t, diskB)
	wb := watchFile(t, diskB, watchOpens)
	hotClaim(t, keyA, "hot2", "sym-hot-2")
	s := waitVolumePending(t, keyA, "hot2")
	t.Logf("state file → b's disk: %s: %s", s.Reason, s.Message)
	if s.Reason != storage.ReasonPathNotAllowed {
		t.Errorf("hot2: reason %s, want %s", s.Reason, storage.ReasonPathNotAllowed)
	}
	waitAgentEvent(t, a, va, s.Reason)
	wb.none(t, "state file → b's disk")
	recB.check(t, "state file → b's disk")
	untouched("state file → b's disk")
	ag.stop()
	mustRemove(t, stateA)
	mustRename(t, stateA+".aside", stateA)
	a = ag.start()
	waitVolumes(t, keyA, vmletv1.VolumeReady, "hot1", "hot2")

	// 4. A claim's disk.img (made at hotplug when missing) is a link out of the claim to the
	// canary.
	plantLink(t, can.path, filepath.Join(cl["sym-hot-3"].Path, storage.ClaimImage))
	w = watchFile(t, can.path, watchAll)
	hotClaim(t, keyA, "hot3", "sym-hot-3")
	s = waitVolumePending(t, keyA, "hot3")
	t.Logf("claim disk.img → canary: %s: %s", s.Reason, s.Message)
	if s.Reason != storage.ReasonPathNotAllowed {
		t.Errorf("hot3: reason %s, want %s", s.Reason, storage.ReasonPathNotAllowed)
	}
	waitAgentEvent(t, a, va, s.Reason)
	w.none(t, "claim disk.img → canary")
	can.check(t, "claim disk.img → canary")
	mustRemove(t, filepath.Join(cl["sym-hot-3"].Path, storage.ClaimImage))
	ag.stop()
	ag.start()
	waitVolumes(t, keyA, vmletv1.VolumeReady, "hot1", "hot2", "hot3")
	untouched("claim disk.img → canary")

	for _, v := range vmis {
		deleteAndWait(t, v)
	}
	ag.stop()
	settleAudit(t, tally, before)
}

// launcherWrapper writes a launcher binary that, running as the launchers' user before it
// execs the real launcher, plants logs/serial.log in its run folder as a link to target: what
// any other process of that user could do in the window between the launcher making its logs
// folder and QEMU's start, made deterministic.
func launcherWrapper(t *testing.T, target string) string {
	t.Helper()
	p := filepath.Join(nodeDir(t), "vmlet-launcher-planting")
	script := fmt.Sprintf("#!/bin/sh\nmkdir -p logs && ln -s '%s' logs/serial.log\nexec '%s' \"$@\"\n", target, launcherBinary)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// faultSymlinkLog: symlinks planted where VMI a's logs are written. Its serial console log
// is a link to VMI b's disk when a's QEMU is to start: the start is refused
// (Synchronized=False SyncFailed, a Warning event), b's disk is not opened, and once the link
// is gone a starts. Then the agent's record of a's exit (written as root when a's launcher
// exits) is a link to a root canary when a is deleted: the record replaces the link, the
// canary is not opened, and a is gone with nothing left.
func faultSymlinkLog(t *testing.T, tally *faultTally) {
	var applied storageDone
	opts := agentOptions{Trace: applied.trace}
	before := auditNode(t)
	ag := &restartable{t: t, opts: opts}
	defer ag.stop()
	a := ag.start()
	vb := spaceVMI("symlog-b")
	if err := env.Client.Create(context.Background(), vb); err != nil {
		t.Fatal(err)
	}
	pidB := waitCondition(t, client.ObjectKeyFromObject(vb), vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute).Status.Launcher.PID
	diskB := filepath.Join(volumeRoot, string(vb.UID), "disks", "scratch.qcow2")

	// The next agent starts new launchers through the wrapper; b's keeps running.
	ag.stop()
	n := applied.count(vb.UID)
	func() {
		real := launcherBinary
		defer func() { launcherBinary = real }() // read by startAgent only
		launcherBinary = launcherWrapper(t, diskB)
		a = ag.start()
	}()
	applied.wait(t, vb, n)
	recB := recordFile(t, diskB)
	wb := watchFile(t, diskB, watchOpens)

	va := newVMI("symlog-a")
	va.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	va.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	if err := env.Client.Create(context.Background(), va); err != nil {
		t.Fatal(err)
	}
	keyA := client.ObjectKeyFromObject(va)
	var cur *vmletv1.VirtualMachineInstance
	eventually(t, 2*time.Minute, "a's start refused or a running", func() (bool, string) {
		v, err := getVMI(t, keyA)
		if err != nil {
			return false, err.Error()
		}
		cur = v
		s := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return s != nil && s.Status == metav1.ConditionFalse || meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady), summary(v)
	})
	serial := consoleLog(va)
	if fi, err := os.Lstat(serial); err != nil || fi.Mode().Type() != fs.ModeSymlink {
		t.Fatalf("the wrapper did not plant the link: %v (%v)", fi, err)
	}
	c := meta.FindStatusCondition(cur.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(vmistatus.ReasonSyncFailed) {
		t.Errorf("a started with its serial log a link to b's disk: %s", summary(cur))
	} else {
		t.Logf("serial log → b's disk: %s: %s", c.Reason, c.Message)
		waitAgentEvent(t, a, va, c.Reason)
	}
	wb.none(t, "serial log → b's disk")
	recB.check(t, "serial log → b's disk")
	if b := mustGetVMI(t, vb); b.Status.Launcher == nil || b.Status.Launcher.PID != pidB || !alive(int(pidB)) {
		tally.lost.Add(1)
		t.Errorf("b's VM was disturbed: launcher %+v, was QEMU pid %d", b.Status.Launcher, pidB)
	}
	mustRemove(t, serial)
	running := waitCondition(t, keyA, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 3*time.Minute)
	waitSerial(t, serial, testguest.MarkerReady)
	if fi, err := os.Lstat(serial); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("a's serial log: %v (%v), want a regular file", fi, err)
	}

	// a's launcher is this agent's child: its exit is recorded as root into launcher.exit.
	can := newCanary(t)
	exit := filepath.Join(runRoot, string(va.UID), "launcher.exit")
	plantLink(t, can.path, exit)
	w := watchFile(t, can.path, watchAll)
	deleteAndWait(t, running)
	w.none(t, "launcher.exit → canary")
	can.check(t, "launcher.exit → canary")

	recB.check(t, "after a's deletion")
	deleteAndWait(t, vb)
	ag.stop()
	settleAudit(t, tally, before)
}
