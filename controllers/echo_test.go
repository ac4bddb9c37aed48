package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// TestEchoFilter: the update event carrying exactly the object of the agent's last status
// write makes no pass; any other version (another writer's), and the echo of a write that
// changed the step (the phase or the migration role: a final phase is followed by the
// teardown), do.
func TestEchoFilter(t *testing.T) {
	r := &VMIReconciler{}
	p := r.notOwnEcho()
	vmi := func(rv string, phase vmletv1.VirtualMachineInstancePhase) *vmletv1.VirtualMachineInstance {
		return &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{UID: "u1", ResourceVersion: rv},
			Status: vmletv1.VirtualMachineInstanceStatus{Phase: phase}}
	}
	passes := func(o *vmletv1.VirtualMachineInstance) bool {
		return p.Update(event.UpdateEvent{ObjectOld: vmi("0", ""), ObjectNew: o})
	}
	if !passes(vmi("5", vmletv1.Running)) {
		t.Error("an update before any write of the agent made no pass")
	}
	r.wroteStatus(vmi("6", vmletv1.Running), false)
	if passes(vmi("6", vmletv1.Running)) {
		t.Error("the echo of the agent's own write made a pass")
	}
	if !passes(vmi("7", vmletv1.Running)) {
		t.Error("another writer's update made no pass")
	}
	r.wroteStatus(vmi("8", vmletv1.Failed), true)
	if !passes(vmi("8", vmletv1.Failed)) {
		t.Error("the echo of a write that changed the step made no pass (no teardown)")
	}
	if !passes(vmi("6", vmletv1.Running)) {
		t.Error("an earlier write is still remembered after a phase change")
	}
}
