package controllers_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/prereq"
)

func readyOf(t *testing.T, name string) (*corev1.Node, *corev1.NodeCondition) {
	t.Helper()
	n := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n); err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return n, &n.Status.Conditions[i]
		}
	}
	return n, nil
}

// TestHeartbeatOwnsReadyInLocalMode: with OwnsReady (local mode, no kubelet) the heartbeat
// registers the Node with Ready=True (VmletReady) and refreshes lastHeartbeatTime on every beat
// while the transition time stays; SetNotReady turns it False with the reason given.
func TestHeartbeatOwnsReadyInLocalMode(t *testing.T) {
	prereq.APIServer(t)
	ctx := context.Background()
	name := "hb-local-" + time.Now().Format("150405.000000")
	hb := &controllers.Heartbeat{Client: env.Client, NodeName: name, Register: true, OwnsReady: true}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}) })
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	_, r := readyOf(t, name)
	if r == nil || r.Status != corev1.ConditionTrue || r.Reason != controllers.ReasonVmletReady || r.Message == "" || r.LastHeartbeatTime.IsZero() {
		t.Fatalf("Ready after the first beat = %+v, want True VmletReady with a message and heartbeat", r)
	}
	if n, _ := readyOf(t, name); n.Labels[corev1.LabelHostname] != name {
		t.Errorf("registered node labels %v, want %s=%s", n.Labels, corev1.LabelHostname, name)
	}
	first := *r
	// Times have a resolution of one second: beat again in the next second.
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for time.Now().Truncate(time.Second).Equal(first.LastHeartbeatTime.Time) {
		<-poll.C
	}
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	_, r = readyOf(t, name)
	if !r.LastHeartbeatTime.After(first.LastHeartbeatTime.Time) || !r.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("second beat: heartbeat %v (was %v), transition %v (was %v); want a newer heartbeat, the same transition",
			r.LastHeartbeatTime, first.LastHeartbeatTime, r.LastTransitionTime, first.LastTransitionTime)
	}
	if err := hb.SetNotReady(ctx, string(vmistatus.ReasonNodeShutdown), "shut down"); err != nil {
		t.Fatal(err)
	}
	if _, r = readyOf(t, name); r.Status != corev1.ConditionFalse || r.Reason != string(vmistatus.ReasonNodeShutdown) {
		t.Errorf("after SetNotReady: %+v, want False NodeShutdown", r)
	}
}

// TestHeartbeatLeavesKubeletConditions: without OwnsReady (cluster mode: a kubelet owns the
// Node) the heartbeat writes its labels and annotations and never the Node's conditions, not
// even on SetNotReady.
func TestHeartbeatLeavesKubeletConditions(t *testing.T) {
	prereq.APIServer(t)
	ctx := context.Background()
	name := "hb-cluster-" + time.Now().Format("150405.000000")
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, n) })
	at := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	n.Status.Conditions = []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: at, LastTransitionTime: at},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: at, LastTransitionTime: at},
	}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	before, _ := readyOf(t, name)
	hb := &controllers.Heartbeat{Client: env.Client, NodeName: name}
	if err := hb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := hb.SetNotReady(ctx, string(vmistatus.ReasonNodeShutdown), "shut down"); err != nil {
		t.Fatal(err)
	}
	after, _ := readyOf(t, name)
	if after.Labels[controllers.LabelSchedulable] != "true" || after.Annotations[controllers.AnnotHeartbeat] == "" {
		t.Errorf("heartbeat did not write its labels/annotation: %v %v", after.Labels, after.Annotations)
	}
	if !equality.Semantic.DeepEqual(before.Status.Conditions, after.Status.Conditions) {
		t.Errorf("the kubelet's conditions changed:\nbefore %+v\nafter  %+v", before.Status.Conditions, after.Status.Conditions)
	}
}
