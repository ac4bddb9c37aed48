package controllers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

func newVMI(name string) *vmletv1.VirtualMachineInstance {
	return guestvmi.VMI(name, guestImage)
}

// eventually polls cond until it holds or the deadline passes; cond explains what it saw.
func eventually(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	if ok, last := pollUntil(d, cond); !ok {
		t.Fatalf("%s: not reached within %s; last seen: %s", what, d, last)
	}
}

func getVMI(t testing.TB, key client.ObjectKey) (*vmletv1.VirtualMachineInstance, error) {
	t.Helper()
	vmi := &vmletv1.VirtualMachineInstance{}
	err := env.Client.Get(context.Background(), key, vmi)
	return vmi, err
}

func waitCondition(t testing.TB, key client.ObjectKey, typ string, want metav1.ConditionStatus, d time.Duration) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var vmi *vmletv1.VirtualMachineInstance
	eventually(t, d, key.Name+" condition "+typ+"="+string(want), func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		vmi = v
		c := meta.FindStatusCondition(v.Status.Conditions, typ)
		return c != nil && c.Status == want, summary(v)
	})
	return vmi
}

func waitPhase(t *testing.T, key client.ObjectKey, want vmletv1.VirtualMachineInstancePhase, d time.Duration) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var vmi *vmletv1.VirtualMachineInstance
	eventually(t, d, key.Name+" phase "+string(want), func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		vmi = v
		return v.Status.Phase == want, summary(v)
	})
	return vmi
}

func summary(v *vmletv1.VirtualMachineInstance) string {
	var b strings.Builder
	b.WriteString("phase=" + string(v.Status.Phase) + " reason=" + v.Status.Reason)
	for _, c := range v.Status.Conditions {
		b.WriteString(" " + c.Type + "=" + string(c.Status) + "(" + c.Reason + ": " + c.Message + ")")
	}
	return b.String()
}

func setPaused(t *testing.T, key client.ObjectKey, paused bool) {
	t.Helper()
	v, err := getVMI(t, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	v.Spec.Paused = paused
	if err := env.Client.Patch(context.Background(), v, patch); err != nil {
		t.Fatalf("patch paused=%v: %v", paused, err)
	}
}

func alive(pid int) bool { return pid > 0 && unix.Kill(pid, 0) == nil }

// assertNothingLeft checks the node-local state of a deleted VMI is gone.
func assertNothingLeft(t testing.TB, uid string, pids ...int) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(runRoot, uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(volumeRoot, uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume folder left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cgroupParent, "vmlet-"+uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("launcher cgroup left behind: %v", err)
	}
	for _, p := range pids {
		if alive(p) {
			t.Errorf("process %d still alive", p)
		}
	}
}

// TestVMILifecycle: create → Running with the guest's boot marker on its console; spec.paused
// flips the Paused condition; delete → graceful shutdown → nothing left behind.
func TestVMILifecycle(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	ctx := context.Background()

	vmi := newVMI("lifecycle")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	if running.Status.Phase != vmletv1.Running || running.Status.NodeName != testNode {
		t.Fatalf("ready VMI: %s node=%s", summary(running), running.Status.NodeName)
	}
	l := running.Status.Launcher
	if l == nil || l.PID == 0 || l.Accelerator == "" || l.QEMUVersion == "" {
		t.Fatalf("launcher status incomplete: %+v", l)
	}
	t.Logf("running: qemu pid %d, %s (%s), QEMU %s", l.PID, l.Accelerator, l.AccelerationReason, l.QEMUVersion)
	waitSerial(t, consoleLog(running), testguest.MarkerReady)
	st, err := a.runtime.State(uid)
	if err != nil {
		t.Fatal(err)
	}
	launcherPid, qemuPid := st.Pid, int(l.PID)

	setPaused(t, key, true)
	p := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionTrue, 30*time.Second)
	if meta.IsStatusConditionTrue(p.Status.Conditions, vmletv1.VirtualMachineInstanceReady) {
		t.Error("paused VMI still Ready")
	}
	setPaused(t, key, false)
	waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionFalse, 30*time.Second)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 30*time.Second)

	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, uid, launcherPid, qemuPid)
}

func tail(b []byte) string {
	if len(b) > 300 {
		b = b[len(b)-300:]
	}
	return string(b)
}

// TestVMICreatedPaused: a VMI created with spec.paused starts with its vCPUs stopped (the guest
// prints nothing), stays Synchronized while paused, and boots once unpaused.
func TestVMICreatedPaused(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	ctx := context.Background()

	vmi := newVMI("created-paused")
	vmi.Spec.Paused = true
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	p := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionTrue, 2*time.Minute)
	if p.Status.Phase != vmletv1.Running {
		t.Errorf("paused at creation: %s", summary(p))
	}
	serial := filepath.Join(runRoot, string(vmi.UID), "logs", "serial.log")
	// A later reconcile (any status write wakes one) must not find the domain out of sync.
	waitCondition(t, key, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, 30*time.Second)
	if b, _ := os.ReadFile(serial); strings.Contains(string(b), testguest.MarkerReady) {
		t.Fatal("a guest created paused booted")
	}
	setPaused(t, key, false)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, time.Minute)
	eventually(t, 2*time.Minute, "guest boot marker after unpause", func() (bool, string) {
		b, err := os.ReadFile(serial)
		return err == nil && strings.Contains(string(b), testguest.MarkerReady), tail(b)
	})
	v := waitCondition(t, key, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionTrue, 30*time.Second)
	if err := env.Client.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
}

// TestStorageLostWhileRunning: a running VMI whose storage no longer applies (here: the new
// agent cannot pull its kernel image) keeps running and says why (Synchronized=False with the
// storage reason); the agent must not crash on it (it once dereferenced the missing spec). The
// pull is retried with back-off, and the status is written per try, not on every reconcile.
func TestStorageLostWhileRunning(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	ctx := context.Background()
	vmi := newVMI("storage-lost")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	a.stop(t)

	// A node whose image source for the kernel is gone and whose cache is empty.
	b := startAgent(t, agentOptions{
		ImageCache:   nodeDir(t),
		ImageSources: map[string]string{guestImage: "oci:" + filepath.Join(t.TempDir(), "missing") + ":test"},
		PullBackOff:  500 * time.Millisecond, PullBackOffMax: time.Second,
	})
	defer b.stop(t)
	eventually(t, time.Minute, "storage failure reported on the running VMI", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason != "SyncFailed" && v.Status.Phase == vmletv1.Running, summary(v)
	})
	since := meta.FindStatusCondition(waitPullBackOff(t, key, "missing", "not found").Status.Conditions,
		vmletv1.VirtualMachineInstanceSynchronized).LastTransitionTime
	writes := countWrites(t, running)
	b.events.waitTries(t, vmi.UID, len(b.events.times(vmi.UID, "ErrImagePull"))+3, 2*time.Minute)
	if w := writes(); w > 3*3 {
		t.Errorf("the running VMI was written %d times during 3 pull tries", w)
	}
	v := waitPullBackOff(t, key, "missing", "not found")
	if v.Status.Phase != vmletv1.Running {
		t.Errorf("phase %s, want Running", v.Status.Phase)
	}
	if c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); !c.LastTransitionTime.Equal(&since) {
		t.Errorf("Synchronized stayed False but its transition time moved from %s to %s", since, c.LastTransitionTime)
	}
	if v.Status.Launcher == nil || v.Status.Launcher.PID != running.Status.Launcher.PID || !alive(int(v.Status.Launcher.PID)) {
		t.Errorf("the guest did not keep running: %+v", v.Status.Launcher)
	}
	if err := env.Client.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, string(vmi.UID), int(running.Status.Launcher.PID))
}
