package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/vmlet/vmlet/controllers/vmimetrics"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

var _ vmimetrics.Launchers = (*VMIReconciler)(nil)

// liveStats is the stats reader of the VMI's launcher while this agent holds a live connection
// to it (its event stream unbroken); vmimetrics.ErrNoLauncher otherwise. Metrics scrapes reuse
// the reconciler's connections: they dial nothing.
func (r *VMIReconciler) liveStats(uid types.UID) (StatsReader, error) {
	r.mu.Lock()
	c := r.conns[uid]
	r.mu.Unlock()
	if c == nil {
		return nil, vmimetrics.ErrNoLauncher
	}
	select {
	case <-c.done:
		return nil, vmimetrics.ErrNoLauncher
	default:
	}
	sr, ok := c.l.(StatsReader)
	if !ok {
		return nil, vmimetrics.ErrNoLauncher
	}
	return sr, nil
}

// DomainStats reads the statistics of the VMI's live launcher (vmimetrics.Launchers).
func (r *VMIReconciler) DomainStats(ctx context.Context, uid types.UID) (*pb.DomainStatsResponse, error) {
	sr, err := r.liveStats(uid)
	if err != nil {
		return nil, err
	}
	return sr.DomainStats(ctx)
}

// MigrationProgress reads the migration progress of the VMI's live launcher (vmimetrics.Launchers).
func (r *VMIReconciler) MigrationProgress(ctx context.Context, uid types.UID) (*pb.MigrationStatus, error) {
	sr, err := r.liveStats(uid)
	if err != nil {
		return nil, err
	}
	return sr.MigrationProgress(ctx)
}

// reconcileResult classifies a VMI reconcile's end for vmlet_vmi_reconcile_total.
func reconcileResult(res ctrl.Result, err error, conflict bool) string {
	switch {
	case conflict:
		return vmimetrics.ResultConflict
	case err != nil:
		return vmimetrics.ResultError
	case res.RequeueAfter > 0 || res.Requeue: //nolint:staticcheck // Requeue is still honoured
		return vmimetrics.ResultRequeue
	}
	return vmimetrics.ResultOK
}
