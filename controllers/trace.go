package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Steps of a VMI's start, then of its pause, that VMIReconciler.Trace receives, in the order
// they happen. A step with start == end marks a moment.
const (
	TraceFirstReconcile = "first-reconcile" // moment: this agent's first pass over the VMI
	TraceTranslate      = "translate"       // the translation of a pass
	TraceStorage        = "storage"         // the storage operation (images, disks, ISO)
	TraceLauncherExec   = "launcher-exec"   // starting the launcher process in its jail
	TraceLauncherReady  = "launcher-ready"  // moment: a pass finds the launcher ready, no domain yet
	TraceNetwork        = "network"         // wiring the pod network before the domain starts
	TraceQEMUStart      = "qemu-start"      // Sync of a launcher without a domain: QEMU started
	TraceStatusRunning  = "status-running"  // the status write that says Running
	TracePause          = "pause"           // the launcher's Pause (QMP stop) for spec.paused
	TraceStatusPaused   = "status-paused"   // the status write that says Paused
)

// trace reports a step that began at start and ends now.
func (r *VMIReconciler) trace(uid types.UID, step string, start time.Time) {
	if r.Trace != nil {
		r.Trace(uid, step, start, time.Now())
	}
}

// pausedCondition reports whether status holds Paused=True.
func pausedCondition(status *vmletv1.VirtualMachineInstanceStatus) bool {
	return meta.IsStatusConditionTrue(status.Conditions, vmletv1.VirtualMachineInstancePaused)
}
