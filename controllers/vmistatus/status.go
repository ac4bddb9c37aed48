package vmistatus

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// IsFinal reports whether p is Succeeded or Failed.
func IsFinal(p vmletv1.VirtualMachineInstancePhase) bool {
	return p == vmletv1.Succeeded || p == vmletv1.Failed
}

// SetPhase moves the VMI to phase p, recording the transition time. Final phases are sticky.
func SetPhase(vmi *vmletv1.VirtualMachineInstance, p vmletv1.VirtualMachineInstancePhase) {
	if vmi.Status.Phase == p || IsFinal(vmi.Status.Phase) {
		return
	}
	vmi.Status.Phase = p
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps,
		vmletv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.Now()})
}

// SetCondition sets condition t to ok with reason and msg (meta.SetStatusCondition, with the
// VMI's generation as ObservedGeneration). The Synchronized condition has its own setters.
func SetCondition(vmi *vmletv1.VirtualMachineInstance, t string, ok bool, reason Reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&vmi.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: string(reason), Message: msg, ObservedGeneration: vmi.Generation,
	})
}

// Synchronized sets Synchronized=True, reason Synced: the domain matches the spec.
func Synchronized(vmi *vmletv1.VirtualMachineInstance) {
	SetCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, true, ReasonSynced, "domain matches the spec")
}

// NotSynchronized sets Synchronized=False with reason and msg: why the domain does not match
// the spec (yet), while the VMI goes on (a failure that ends it is Fail's).
func NotSynchronized(vmi *vmletv1.VirtualMachineInstance, reason Reason, msg string) {
	SetCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, false, reason, msg)
}

// Fail ends the VMI with reason: phase Failed, status.reason, Synchronized=False and
// Ready=False. A Succeeded VMI stays as it is; a Failed one takes the new reason. It reports
// whether the VMI became Failed now (the caller's Warning event, sent once).
func Fail(vmi *vmletv1.VirtualMachineInstance, reason Reason, msg string) (failed bool) {
	if vmi.Status.Phase == vmletv1.Succeeded {
		return false
	}
	failed = vmi.Status.Phase != vmletv1.Failed
	SetPhase(vmi, vmletv1.Failed)
	vmi.Status.Reason = string(reason)
	SetCondition(vmi, vmletv1.VirtualMachineInstanceSynchronized, false, reason, msg)
	SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, reason, msg)
	return failed
}

// Succeed ends the VMI because its guest powered off by itself: phase Succeeded, reason
// GuestShutdown, Ready=False. A final VMI stays as it is. It reports whether the VMI became
// Succeeded now (the caller's Normal event).
func Succeed(vmi *vmletv1.VirtualMachineInstance) (succeeded bool) {
	if IsFinal(vmi.Status.Phase) {
		return false
	}
	SetPhase(vmi, vmletv1.Succeeded)
	vmi.Status.Reason = string(ReasonGuestShutdown)
	SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, ReasonGuestShutdown, "the guest powered off")
	return true
}

// PausedReason is the Paused condition's reason for the launcher's (QEMU's) run-state reason.
func PausedReason(runState string) Reason {
	switch runState {
	case "user", "":
		return ReasonPausedByUser
	case "migration", "postmigrate":
		return ReasonPausedForMigration
	case "io-error":
		return ReasonPausedIOError
	default:
		return ReasonPaused
	}
}

// KeepTransitionTimes gives every condition of vmi whose status is the one it had in before
// (the status as read at the start of a pass) its transition time from before: a condition
// set to another status and back within one pass did not transition. One pass may set a
// condition in several steps (observe the domain, then report storage); only its final value
// counts.
func KeepTransitionTimes(before *vmletv1.VirtualMachineInstanceStatus, vmi *vmletv1.VirtualMachineInstance) {
	for i := range vmi.Status.Conditions {
		c := &vmi.Status.Conditions[i]
		if old := meta.FindStatusCondition(before.Conditions, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
}
