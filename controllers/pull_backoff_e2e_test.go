package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIImagePullBackOff: a VMI whose kernelBoot image cannot be pulled waits for it as a pod
// waits for its image: registry down, then up without the image, it stays Scheduled with
// Synchronized=False ImagePullBackOff (the next try's time and the cause in the message), one
// ErrImagePull Warning event per try and the tries the back-off apart (1 s doubling to 4 s
// here), no launcher meanwhile; once the image is pushed the next try pulls it and the VMI
// runs, and its back-off is forgotten.
func TestVMIImagePullBackOff(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	img, err := images.KernelBoot(files.Kernel, guestvmi.KernelPath, files.Initrd, guestvmi.InitrdPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := storagetest.StartRegistry(t)
	source := reg.Host + "/vmlet/guest:1"
	reg.Close()
	const image = "vmlet.dev/pull-backoff:1"
	initial, maxWait := time.Second, 4*time.Second
	a := startAgent(t, agentOptions{ImageSources: map[string]string{image: source}, ImageCache: t.TempDir(),
		PullBackOff: initial, PullBackOffMax: maxWait})
	defer a.stop(t)
	ctx := context.Background()
	vmi := guestvmi.VMI("pull-backoff", image)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)

	// Registry down: tries at +0, +1 s, +3 s.
	a.events.waitTries(t, vmi.UID, 3, time.Minute)
	got := waitPullBackOff(t, key, source, "connection refused")
	if got.Status.Phase != vmletv1.Scheduled {
		t.Errorf("a VMI waiting for its image is %s, want Scheduled", got.Status.Phase)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, vmletv1.VirtualMachineInstanceReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ImagePullBackOff" {
		t.Errorf("a VMI waiting for its image does not say it is not Ready for that: %s", summary(got))
	}
	if _, err := os.Stat(filepath.Join(runRoot, string(vmi.UID))); !os.IsNotExist(err) {
		t.Errorf("a launcher was started for a VMI without its image: %v", err)
	}
	waitEvent(t, got, "ErrImagePull")

	// Registry up, the image not there yet: not found is retried too.
	reg.Reopen(t)
	waitPullBackOff(t, key, source, "not found")

	// The image appears: the next try pulls it and the guest boots.
	reg.Push(t, "vmlet/guest:1", img)
	t0 := time.Now()
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	tries := a.events.times(vmi.UID, "ErrImagePull")
	t.Logf("image pushed → VMI Ready in %s, after %d failed tries", time.Since(t0).Round(time.Millisecond), len(tries))
	checkTries(t, tries, initial, maxWait)
	if running.Status.Phase != vmletv1.Running {
		t.Errorf("phase %s, want Running", running.Status.Phase)
	}
	if n := a.r.PullBackOffEntries(); n != 0 {
		t.Errorf("%d back-off entries left after the pull succeeded", n)
	}
	if n := len(a.events.times(vmi.UID, "Pulled")); n != 1 {
		t.Errorf("%d Pulled events, want 1", n)
	}
	// A booted guest (acpid listens) powers off at once on delete.
	waitSerial(t, consoleLog(running), testguest.MarkerReady)
	t0 = time.Now()
	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	t.Logf("deleted in %s", time.Since(t0).Round(time.Millisecond))
	assertNothingLeft(t, string(vmi.UID), int(running.Status.Launcher.PID))
}

// TestVMIImagePullBackOffDeleted: deleting a VMI whose pull is backing off ends its tries and
// its back-off entry; another VMI backing off meanwhile (on a containerDisk volume, its kernel
// image pulled) shows the agent kept trying its own (and that time passed), and leaves no
// entry either once deleted.
func TestVMIImagePullBackOffDeleted(t *testing.T) {
	prereq.Root(t)
	reg := storagetest.StartRegistry(t)
	reg.Close()
	const image = "vmlet.dev/never-there:1"
	a := startAgent(t, agentOptions{ImageSources: map[string]string{image: reg.Host + "/vmlet/never:1"},
		ImageCache: t.TempDir(), PullBackOff: 500 * time.Millisecond, PullBackOffMax: time.Second})
	defer a.stop(t)
	ctx := context.Background()
	doomed, control := guestvmi.VMI("pull-deleted", image), newVMI("pull-control")
	control.Spec.Volumes = []vmletv1.Volume{{Name: "root", VolumeSource: vmletv1.VolumeSource{
		ContainerDisk: &vmletv1.ContainerDiskSource{Image: image}}}}
	for _, v := range []*vmletv1.VirtualMachineInstance{doomed, control} {
		if err := env.Client.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	a.events.waitTries(t, doomed.UID, 2, time.Minute)
	waitPullBackOff(t, client.ObjectKeyFromObject(doomed), reg.Host, "kernel boot: pull")
	waitPullBackOff(t, client.ObjectKeyFromObject(control), reg.Host, "volume root: pull")
	if err := env.Client.Delete(ctx, doomed); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, client.ObjectKeyFromObject(doomed))
	n := len(a.events.times(doomed.UID, "ErrImagePull"))
	if e := a.r.PullBackOffEntries(); e != 1 {
		t.Errorf("%d back-off entries after one of two VMIs was deleted, want 1", e)
	}
	// Three more tries of the other VMI: longer than the longest back-off. Its status is
	// written twice per try (ErrImagePull, then ImagePullBackOff), not on every reconcile.
	writes := countWrites(t, control)
	a.events.waitTries(t, control.UID, len(a.events.times(control.UID, "ErrImagePull"))+3, time.Minute)
	if m := len(a.events.times(doomed.UID, "ErrImagePull")); m != n {
		t.Errorf("the deleted VMI's image was tried %d more times", m-n)
	}
	if w := writes(); w > 3*3 {
		t.Errorf("the waiting VMI was written %d times during 3 tries", w)
	}
	if err := env.Client.Delete(ctx, control); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, client.ObjectKeyFromObject(control))
	if e := a.r.PullBackOffEntries(); e != 0 {
		t.Errorf("%d back-off entries left with no VMI", e)
	}
}

// waitPullBackOff waits until the VMI waits out a pull back-off of image whose cause mentions
// cause, and returns it.
func waitPullBackOff(t *testing.T, key client.ObjectKey, image, cause string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, key.Name+" ImagePullBackOff ("+cause+")", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != "ImagePullBackOff" {
			return false, summary(v)
		}
		for _, want := range []string{"Back-off pulling image", image, "next try in", cause} {
			if !strings.Contains(c.Message, want) {
				return false, summary(v)
			}
		}
		return true, ""
	})
	return got
}

// checkTries: consecutive failed tries are the back-off apart (initial, doubling, capped at
// maxWait): never sooner, and not much later either (the agent requeues for the next try
// rather than waiting to be woken).
func checkTries(t *testing.T, tries []time.Time, initial, maxWait time.Duration) {
	t.Helper()
	d := initial
	for i := 1; i < len(tries); i++ {
		gap := tries[i].Sub(tries[i-1])
		if gap < d-50*time.Millisecond || gap > d+3*time.Second {
			t.Errorf("try %d came %s after the previous one; its back-off was %s", i+1, gap.Round(time.Millisecond), d)
		}
		d = min(2*d, maxWait)
	}
}

// recordedEvents passes the agent's events on to its recorder and remembers each: the API
// server cannot count them (the events API folds repeats into a series whose count it sends
// every 30 minutes).
type recordedEvents struct {
	events.EventRecorder
	mu  sync.Mutex
	got []recordedEvent
}

type recordedEvent struct {
	uid    types.UID
	reason string
	at     time.Time
}

func (e *recordedEvents) Eventf(regarding, related runtime.Object, typ, reason, action, note string, args ...any) {
	if o, ok := regarding.(metav1.Object); ok {
		e.mu.Lock()
		e.got = append(e.got, recordedEvent{uid: o.GetUID(), reason: reason, at: time.Now()})
		e.mu.Unlock()
	}
	e.EventRecorder.Eventf(regarding, related, typ, reason, action, note, args...)
}

// times are when events with reason were recorded about the object uid.
func (e *recordedEvents) times(uid types.UID, reason string) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ts []time.Time
	for _, ev := range e.got {
		if ev.uid == uid && ev.reason == reason {
			ts = append(ts, ev.at)
		}
	}
	return ts
}

// waitTries waits for n ErrImagePull events (failed pull tries) about uid.
func (e *recordedEvents) waitTries(t *testing.T, uid types.UID, n int, d time.Duration) {
	t.Helper()
	eventually(t, d, fmt.Sprintf("%d failed pull tries", n), func() (bool, string) {
		got := len(e.times(uid, "ErrImagePull"))
		return got >= n, fmt.Sprintf("%d tries", got)
	})
}

// countWrites watches the VMI and returns a func that says how often it changed since.
func countWrites(t *testing.T, vmi *vmletv1.VirtualMachineInstance) func() int {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := wc.Watch(ctx, &vmletv1.VirtualMachineInstanceList{}, client.InNamespace(vmi.Namespace),
		client.MatchingFields{"metadata.name": vmi.Name})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	n := 0
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}
