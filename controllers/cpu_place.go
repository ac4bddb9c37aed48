package controllers

import (
	"context"
	"fmt"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// placeVCPUs moves a running domain's QEMU into its VM's CPU group and its vCPU threads into
// their low-weight group once, when
// the runtime keeps them there (VCPUPlacer) and they are not there yet: one read of the group
// per reconcile, one launcher call per QEMU start (and per agent restart that finds the group
// empty). A failure leaves the guest running at its VM's weight and is retried.
func (r *VMIReconciler) placeVCPUs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) error {
	p, ok := r.Runtime.(VCPUPlacer)
	if !ok || (dom.State != DomainRunning && dom.State != DomainPaused) {
		return nil
	}
	id := string(vmi.UID)
	if placed, err := p.VCPUsPlaced(id); err != nil || placed {
		return err
	}
	tids, err := l.VCPUThreads(ctx)
	if err != nil {
		return fmt.Errorf("place vcpu threads: %w", err)
	}
	return p.PlaceVCPUs(id, dom.Pid, tids)
}
