package controllers

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/qemu/launcher"
)

func isFinal(p vmletv1.VirtualMachineInstancePhase) bool {
	return p == vmletv1.Succeeded || p == vmletv1.Failed
}

// setPhase moves the VMI to phase, recording the transition time. Final phases are sticky.
func setPhase(vmi *vmletv1.VirtualMachineInstance, p vmletv1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == p || isFinal(vmi.Status.Phase) {
		return
	}
	vmi.Status.Phase = p
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		vmletv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.Now()})
}

func setCondition(vmi *vmletv1.VirtualMachineInstance, t string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&vmi.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: vmi.Generation,
	})
}

// fail ends the VMI with a reason: Failed phase, Synchronized=False, Ready=False.
func (r *VMIReconciler) fail(vmi *vmletv1.VirtualMachineInstance, reason, msg string) {
	if vmi.Status.Phase != vmletv1.Failed {
		r.Recorder.Eventf(vmi, nil, "Warning", reason, "Fail", "%s", msg)
	}
	setPhase(vmi, vmletv1.Failed)
	vmi.Status.Reason = reason
	setCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, false, reason, msg)
	setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, reason, msg)
}

// launcherExited ends the VMI from how its launcher exited (qemu/launcher's Exit* codes): 0
// means the guest powered off by itself.
func (r *VMIReconciler) launcherExited(vmi *vmletv1.VirtualMachineInstance, ex *process.Exit) {
	switch {
	case ex.Signal != "":
		r.fail(vmi, "LauncherKilled", fmt.Sprintf("the launcher was killed by %s", ex.Signal))
	case !ex.Known:
		r.fail(vmi, "LauncherGone", "the launcher exited while no agent watched it")
	case ex.Code == launcher.ExitOK:
		if vmi.Status.Phase != vmletv1.Succeeded {
			r.Recorder.Eventf(vmi, nil, "Normal", "GuestShutdown", "Stop", "the guest powered off")
		}
		setPhase(vmi, vmletv1.Succeeded)
		vmi.Status.Reason = "GuestShutdown"
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, "GuestShutdown", "the guest powered off")
	case ex.Code == launcher.ExitForced:
		r.fail(vmi, "ForcedShutdown", "the guest did not power off within its grace period and was stopped by force")
	case ex.Code == launcher.ExitQEMUDied:
		r.fail(vmi, "QEMUDied", "QEMU ended unexpectedly (crashed or killed); see the launcher's logs/qemu.log")
	default:
		r.fail(vmi, "LauncherFailed", fmt.Sprintf("the launcher exited with status %d; see its launcher.log", ex.Code))
	}
}

// observe writes the launcher's domain state into the VMI's status.
func (r *VMIReconciler) observe(vmi *vmletv1.VirtualMachineInstance, d DomainState) {
	pod := "" // the cluster controller's: which launcher pod runs the VMI
	if vmi.Status.Launcher != nil {
		pod = vmi.Status.Launcher.Pod
	}
	vmi.Status.Launcher = &vmletv1.LauncherStatus{
		Pod:                pod,
		PID:                int64(d.Pid),
		Accelerator:        vmletv1.Accelerator(d.Accel),
		AccelerationReason: d.AccelReason,
		QEMUVersion:        d.QEMUVersion,
	}
	setCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, true, "Synced", "domain matches the spec")
	// The launcher can migrate (PrepareMigrationTarget/Migrate), but no migration controller
	// drives VirtualMachineInstanceMigrations yet: say so rather than promise it.
	setCondition(vmi, vmletv1.VirtualMachineInstanceIsMigratable, false, "MigrationControllerMissing",
		"this vmlet build has no migration controller yet")
	if d.AgentConnected {
		setCondition(vmi, vmletv1.VirtualMachineInstanceAgentConnected, true, "AgentConnected", "qemu-guest-agent answers")
	} else {
		meta.RemoveStatusCondition(&vmi.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	}
	switch d.State {
	case DomainRunning:
		setPhase(vmi, vmletv1.Running)
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, true, "Running", "the guest is running")
		setCondition(vmi, vmletv1.VirtualMachineInstancePaused, false, "NotPaused", "")
	case DomainPaused:
		setPhase(vmi, vmletv1.Running)
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, "Paused", "the guest's vCPUs are stopped")
		setCondition(vmi, vmletv1.VirtualMachineInstancePaused, true, pausedReason(d.Reason), "the guest's vCPUs are stopped")
	case DomainShuttingDown:
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, "ShuttingDown", "the guest is shutting down")
	case DomainShutoff:
		setPhase(vmi, vmletv1.Succeeded)
		vmi.Status.Reason = "GuestShutdown"
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, "GuestShutdown", "the guest powered off")
	case DomainCrashed:
		r.fail(vmi, "DomainCrashed", "QEMU ended unexpectedly: "+d.Reason)
	default:
		setPhase(vmi, vmletv1.Scheduled)
		setCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, "Starting", "the domain is starting")
	}
}

func pausedReason(r string) string {
	switch r {
	case "user", "":
		return "PausedByUser"
	case "migration", "postmigrate":
		return "PausedForMigration"
	case "io-error":
		return "PausedIOError"
	default:
		return "Paused"
	}
}
