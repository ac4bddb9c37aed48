package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/cluster"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/prereq"
)

// beat is the tests' heartbeat interval: a node goes stale 3 s after its last beat.
const beat = time.Second

// startNodeController runs the node controller in a manager of its own until the test ends.
func startNodeController(t *testing.T) {
	t.Helper()
	prereq.APIServer(t)
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme: env.Scheme, Cache: cluster.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	nc := &cluster.NodeController{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(fmt.Sprintf("vmlet-node-controller-%d", managers.Add(1))), Interval: time.Hour}
	if err := nc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("node controller manager: %v", err)
		}
	})
}

// runningOn schedules vmi's launcher pod to node and writes what the node agent would: Running,
// Ready.
func runningOn(t *testing.T, vmi *vmletv1.VirtualMachineInstance, node string) *corev1.Pod {
	t.Helper()
	pod := waitPod(t, vmi)
	bind(t, pod, node)
	v := waitVMI(t, vmi, "Scheduled", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Scheduled })
	vmistatus.SetPhase(v, vmletv1.Running)
	vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceReady, true, vmistatus.ReasonRunning, "the domain runs")
	if err := env.Client.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestUnresponsiveNode: a node whose agent beats every second (the interval it publishes; the
// controller's own fallback is an hour) and then stops → 3 s after the last beat, not before,
// the node is vmlet.dev/schedulable=false with a NodeUnresponsive Event; its VMIs get
// Ready=False NodeUnresponsive and stay Running while their launcher pods live; one whose pod
// failed and one whose pod was deleted end Failed with reason NodeUnresponsive. The agent
// beating again makes the node schedulable again, and it stays so while it beats.
func TestUnresponsiveNode(t *testing.T) {
	startController(t)
	startNodeController(t)
	ctx := context.Background()
	ns := namespace(t)
	nodeName := "stale-" + ns
	hb := &controllers.Heartbeat{Client: env.Client, NodeName: nodeName, Interval: beat, Register: true}
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}) })
	node := getNode(t, nodeName)
	lastBeat, _ := time.Parse(time.RFC3339, node.Annotations[controllers.AnnotHeartbeat])
	if node.Annotations[controllers.AnnotHeartbeatInterval] != beat.String() {
		t.Fatalf("published interval %q, want %s", node.Annotations[controllers.AnnotHeartbeatInterval], beat)
	}

	alive, failedPod, deleted := newVMI(t, ns, "alive", nil), newVMI(t, ns, "podfailed", nil), newVMI(t, ns, "poddeleted", nil)
	runningOn(t, alive, nodeName)
	fp := runningOn(t, failedPod, nodeName)
	dp := runningOn(t, deleted, nodeName)

	// No further beat: stale 3 intervals after the last one.
	waitNodeLabel(t, nodeName, "false", 3*beat+10*time.Second)
	if early := time.Until(lastBeat.Add(3 * beat)); early > 0 {
		t.Fatalf("marked unschedulable %s before its heartbeat was 3 intervals old", early)
	}
	t.Logf("unschedulable %s after the last beat", time.Since(lastBeat).Round(time.Millisecond))
	waitNodeEvent(t, nodeName, string(vmistatus.ReasonNodeUnresponsive))
	for _, v := range []*vmletv1.VirtualMachineInstance{alive, failedPod, deleted} {
		got := waitVMI(t, v, "Ready=False NodeUnresponsive", func(v *vmletv1.VirtualMachineInstance) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == string(vmistatus.ReasonNodeUnresponsive)
		})
		if got.Status.Phase != vmletv1.Running {
			t.Errorf("%s: phase %s while its launcher pod lives, want Running", v.Name, got.Status.Phase)
		}
	}

	// Launcher pods gone or not running → Failed, reason NodeUnresponsive.
	p := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(fp), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, dp, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for _, v := range []*vmletv1.VirtualMachineInstance{failedPod, deleted} {
		got := waitVMI(t, v, "Failed", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Failed })
		if got.Status.Reason != string(vmistatus.ReasonNodeUnresponsive) {
			t.Errorf("%s: failed with reason %q, want NodeUnresponsive (%s)", v.Name, got.Status.Reason, summary(got))
		}
		// One failure, one Warning, whichever controller saw the pod's end first.
		waitEvent(t, v, "Warning", string(vmistatus.ReasonNodeUnresponsive))
	}
	if got := getVMI(t, alive); got.Status.Phase != vmletv1.Running {
		t.Errorf("alive: %s, want Running (its pod lives)", summary(got))
	}

	// The agent is back: schedulable, and it stays so past 3 intervals while it beats.
	hctx, stop := context.WithCancel(ctx)
	hdone := make(chan error, 1)
	go func() { hdone <- hb.Start(hctx) }()
	defer func() {
		stop()
		if err := <-hdone; err != nil {
			t.Errorf("heartbeat: %v", err)
		}
	}()
	waitNodeLabel(t, nodeName, "true", 10*time.Second)
	stays := 5 * beat
	if label, changed := watchNodeLabel(t, nodeName, stays); changed {
		t.Fatalf("node labelled schedulable=%s while its agent beat", label)
	}
}

func getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNodeLabel watches the node until its schedulable label is want.
func waitNodeLabel(t *testing.T, name, want string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w := watchNode(t, ctx, name)
	defer w.Stop()
	last := ""
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("node %s: watch ended before %s=%s (last %q)", name, controllers.LabelSchedulable, want, last)
			}
			if n, isNode := e.Object.(*corev1.Node); isNode {
				if last = n.Labels[controllers.LabelSchedulable]; last == want {
					return
				}
			}
		case <-ctx.Done():
			t.Fatalf("node %s: not %s=%s within %s (last %q)", name, controllers.LabelSchedulable, want, d, last)
		}
	}
}

// watchNodeLabel watches the node for d and reports a schedulable label other than "true".
func watchNodeLabel(t *testing.T, name string, d time.Duration) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	w := watchNode(t, ctx, name)
	defer w.Stop()
	for {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				return "", false
			}
			if n, isNode := e.Object.(*corev1.Node); isNode && n.Labels[controllers.LabelSchedulable] != "true" {
				return n.Labels[controllers.LabelSchedulable], true
			}
		case <-ctx.Done():
			return "", false
		}
	}
}

func watchNode(t *testing.T, ctx context.Context, name string) watch.Interface {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &corev1.NodeList{}, client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// waitNodeEvent waits for a Normal Event of reason about the node.
func waitNodeEvent(t *testing.T, node, reason string) {
	t.Helper()
	eventually(t, "node event "+reason, func() (bool, string) {
		var l eventsv1.EventList
		if err := env.Client.List(context.Background(), &l); err != nil {
			return false, err.Error()
		}
		for _, e := range l.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == reason && e.Type == corev1.EventTypeNormal {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(l.Items))
	})
}
