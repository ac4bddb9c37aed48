package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/ops"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// A run-state change: the launcher call that makes the domain's run state follow spec.paused.
const (
	runPause   = "pause"   // QMP stop
	runUnpause = "unpause" // QMP cont
)

// reconcilePause makes the domain's run state follow spec.paused. The pause (or unpause) runs
// as a tracked operation whose end wakes the VMI, not inside the pass: with 100 guests on two
// emulated cores QEMU takes 0.1–0.6 s to stop one (BENCHMARKS.md), and a pass that waited for
// it held one of the agent's workers while every other VMI's pause queued behind it. The pass
// that finds the operation ended sends its event and returns the domain as the launcher
// answered; a failed one is the pass's error (the next pass tries again). The domain reaching
// the asked state some other way (a QMP stop through vmctl) needs no call; an operation that
// ended meanwhile is still reported.
func (r *VMIReconciler) reconcilePause(vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) (DomainState, error) {
	t := r.pauseTracker()
	var change string
	switch {
	case vmi.Spec.Paused && dom.State == DomainRunning:
		change = runPause
	case !vmi.Spec.Paused && dom.State == DomainPaused:
		change = runUnpause
	}
	if change == "" {
		if out, ok := t.Take(vmi.UID); ok && out.Err == nil {
			r.pauseEvent(vmi, out.Value)
		}
		return dom, nil
	}
	out := t.Ensure(vmi.UID, change, func(ctx context.Context) (DomainState, error) {
		if change == runUnpause {
			return l.Unpause(ctx)
		}
		t0 := time.Now()
		d, err := l.Pause(ctx)
		r.trace(vmi.UID, TracePause, t0)
		return d, err
	})
	if out.State == ops.Running {
		return dom, nil // its end wakes the VMI
	}
	t.Forget(vmi.UID)
	if out.Err != nil {
		return dom, fmt.Errorf("%s: %w", change, out.Err)
	}
	r.pauseEvent(vmi, out.Value)
	return out.Value, nil
}

// pauseEvent says what a run-state change did.
func (r *VMIReconciler) pauseEvent(vmi *vmletv1.VirtualMachineInstance, d DomainState) {
	switch d.State {
	case DomainPaused:
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonPaused), "Pause", "guest vCPUs stopped (spec.paused)")
	case DomainRunning:
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonResumed), "Unpause", "guest vCPUs resumed (spec.paused=false)")
	}
}

// pauseTracker is the node's run-state changes, made on first use.
func (r *VMIReconciler) pauseTracker() *ops.Tracker[types.UID, DomainState] {
	return lazyTracker(r, &r.pauseOps, 0, r.wakeUID) // each call has its own deadline
}
