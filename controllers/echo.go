package controllers

import (
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// The echo of the agent's own status write is not a reason for another pass: the object the
// watch then delivers is exactly the one the pass wrote (its resourceVersion says so: any other
// writer's change has another), computed from everything the pass observed; what changes on
// the node afterwards wakes the VMI by itself (launcher events, operations' ends, requeues).
// Skipping it saves one pass of launcher calls per status write — a quarter of the passes of
// a pause. Only this agent's writes are skipped: the cluster controller's and other nodes'
// agents' (a migration's other side) are not its own.
//
// Two kinds of write still get their next pass: one that changed the phase or this node's
// migration role (Reconcile does not remember it, so its echo is a pass as any other: they
// decide the step; a final phase the teardown, a completed migration the source's cleanup),
// and one whose pass leaves a step for the next (a failed image pull is followed by the wait,
// ImagePullBackOff): that pass requeues the VMI itself.

// wroteStatus remembers vmi's resourceVersion after this agent's status write, unless the
// write changed the step (newStep: the phase, or this node's migration role): that echo makes
// a pass.
func (r *VMIReconciler) wroteStatus(vmi *vmletv1.VirtualMachineInstance, newStep bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wrote == nil {
		r.wrote = map[types.UID]string{}
	}
	if newStep {
		delete(r.wrote, vmi.UID)
		return
	}
	r.wrote[vmi.UID] = vmi.ResourceVersion
}

// ownEcho reports whether o is the object of this agent's last status write.
func (r *VMIReconciler) ownEcho(o client.Object) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rv, ok := r.wrote[o.GetUID()]
	return ok && rv == o.GetResourceVersion()
}

// notOwnEcho filters the update events that are echoes of this agent's status writes.
func (r *VMIReconciler) notOwnEcho() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return !r.ownEcho(e.ObjectNew) }}
}

// notOwnEchoTyped is notOwnEcho for a typed VMI source.
func (r *VMIReconciler) notOwnEchoTyped() predicate.TypedPredicate[*vmletv1.VirtualMachineInstance] {
	return predicate.TypedFuncs[*vmletv1.VirtualMachineInstance]{
		UpdateFunc: func(e event.TypedUpdateEvent[*vmletv1.VirtualMachineInstance]) bool { return !r.ownEcho(e.ObjectNew) },
	}
}
