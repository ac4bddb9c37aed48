package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/cluster"
)

// TestTransitionEventAfterConflict: the pass that sees the launcher pod bound to a node writes
// Scheduled into the VMI's status; when that write conflicts (the node agent wrote the VMI
// meanwhile), the next pass makes the same change. The Scheduled Event is sent once, by the
// pass whose write succeeded, not once per pass (seen by hand: two "scheduled to node" Events
// for one pod).
func TestTransitionEventAfterConflict(t *testing.T) {
	ns := namespace(t)
	vmi := newVMI(t, ns, "vm1", nil)
	c := &conflictingStatus{Client: env.Client}
	rec := &recorder{}
	r := &cluster.Reconciler{Client: c, APIReader: env.Client, Recorder: rec, Pods: testPods, AgentGrace: agentGrace}
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(vmi)}
	if _, err := r.Reconcile(context.Background(), req); err != nil { // makes the launcher pod
		t.Fatal(err)
	}
	pod := waitPod(t, vmi)
	bind(t, pod, "node-7")
	c.conflicts = 1
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if c.conflicts != 0 {
		t.Fatal("the pass wrote no status")
	}
	if n := rec.count("Scheduled"); n != 0 {
		t.Errorf("%d Scheduled events after the pass whose status write conflicted, want 0", n)
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if n := rec.count("Scheduled"); n != 1 {
		t.Errorf("%d Scheduled events after the pass that wrote it, want 1 (all: %v)", n, rec.reasons())
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil { // nothing changes
		t.Fatal(err)
	}
	if n := rec.count("Scheduled"); n != 1 {
		t.Errorf("%d Scheduled events after a pass with nothing to do, want 1", n)
	}
}

// conflictingStatus fails the next `conflicts` status updates with a conflict.
type conflictingStatus struct {
	client.Client
	conflicts int
}

func (c *conflictingStatus) Status() client.SubResourceWriter {
	return conflictWriter{c.Client.Status(), c}
}

type conflictWriter struct {
	client.SubResourceWriter
	c *conflictingStatus
}

func (w conflictWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if w.c.conflicts > 0 {
		w.c.conflicts--
		return apierrors.NewConflict(schema.GroupResource{Group: "vmlet.dev", Resource: "virtualmachineinstances"}, obj.GetName(), fmt.Errorf("the object has been modified"))
	}
	return w.SubResourceWriter.Update(ctx, obj, opts...)
}

// recorder keeps the reasons of the Events it is given.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, reason)
}

func (r *recorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func (r *recorder) count(reason string) int {
	n := 0
	for _, g := range r.reasons() {
		if g == reason {
			n++
		}
	}
	return n
}
