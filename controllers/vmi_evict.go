package controllers

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// evicted reports whether the evacuation controller asked for vmi's shutdown: its node is
// drained and it cannot migrate (evictionStrategy LiveMigrateIfPossible; condition
// DisruptionTarget=True).
func evicted(vmi *vmletv1.VirtualMachineInstance) bool {
	return meta.IsStatusConditionTrue(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceDisruptionTarget)
}

// evict shuts an evicted vmi down as its deletion would (SIGTERM to the launcher: ACPI
// powerdown within the grace period, then QEMU is stopped by force) but keeps the object: it
// ends Failed with reason Evicted, as a VMI whose launcher pod was evicted (KubeVirt lets the
// eviction of a LiveMigrateIfPossible VMI that cannot migrate through).
func (r *VMIReconciler) evict(vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	why := "the node was drained and the VMI could not migrate"
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceDisruptionTarget); c != nil && c.Message != "" {
		why = c.Message
	}
	id := string(vmi.UID)
	st, err := r.Runtime.State(id)
	switch {
	case errors.Is(err, process.ErrNotFound):
		r.fail(vmi, vmistatus.ReasonEvicted, why+" (it had not started)")
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("launcher state: %w", err)
	case st.Exited == nil:
		if err := r.Runtime.Stop(id); err != nil {
			return ctrl.Result{}, err
		}
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonShuttingDown, "evicted: guest shutdown requested")
		return ctrl.Result{RequeueAfter: gracePeriod(vmi) + 5*time.Second}, nil // its exit wakes us first
	}
	o := vmistatus.Exited(st.Exited.Code, st.Exited.Signal, st.Exited.Known)
	r.fail(vmi, vmistatus.ReasonEvicted, fmt.Sprintf("%s; the guest stopped: %s (%s)", why, o.Message, o.Reason))
	return ctrl.Result{}, nil
}
