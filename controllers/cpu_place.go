package controllers

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/ops"
)

// placeVCPUs moves a running domain's QEMU into its VM's CPU group and its vCPU threads into
// their low-weight group once, when the runtime keeps them there (VCPUPlacer) and they are not
// there yet: one read of the group per reconcile, one launcher call per QEMU start (and per
// agent restart that finds the group empty). The move is a tracked operation whose end wakes
// the VMI, not a step of the pass: moving a process between cgroups waits for the kernel
// (13–27 ms here, plus 3–8 ms for the vCPU threads' ids from a booting QEMU), and the pass
// that saw QEMU start goes on to report Running without it. A failure leaves the guest running
// at its VM's weight; it is reported by the next pass and tried again.
func (r *VMIReconciler) placeVCPUs(vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) error {
	p, ok := r.Runtime.(VCPUPlacer)
	if !ok || (dom.State != DomainRunning && dom.State != DomainPaused) {
		return nil
	}
	id := string(vmi.UID)
	if placed, err := p.VCPUsPlaced(id); err != nil || placed {
		return err
	}
	t := r.placeTracker()
	out := t.Ensure(vmi.UID, strconv.Itoa(dom.Pid), func(ctx context.Context) (struct{}, error) {
		tids, err := l.VCPUThreads(ctx)
		if err != nil {
			return struct{}{}, fmt.Errorf("place vcpu threads: %w", err)
		}
		return struct{}{}, p.PlaceVCPUs(id, dom.Pid, tids)
	})
	if out.State == ops.Running {
		return nil // its end wakes the VMI
	}
	t.Forget(vmi.UID) // done: the next pass finds the threads placed, or tries again
	return out.Err
}

// placeTracker is the node's vCPU placements, made on first use.
func (r *VMIReconciler) placeTracker() *ops.Tracker[types.UID, struct{}] {
	return lazyTracker(r, &r.placeOps, placeTimeout, r.wakeUID)
}

// placeTimeout bounds one placement (a launcher call and a few cgroup writes).
const placeTimeout = launcherDialTimeout
