package controllers

import vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"

// The status helpers the node agent uses, for the cluster controller (controllers/cluster),
// so that both record phases and conditions the same way.

// IsFinal reports whether p is Succeeded or Failed.
func IsFinal(p vmletv1.VirtualMachineInstancePhase) bool { return isFinal(p) }

// SetPhase moves the VMI to phase p, recording the transition time; final phases are sticky.
func SetPhase(vmi *vmletv1.VirtualMachineInstance, p vmletv1.VirtualMachineInstancePhase) {
	setPhase(vmi, p)
}

// SetCondition sets condition t (meta.SetStatusCondition with the VMI's generation).
func SetCondition(vmi *vmletv1.VirtualMachineInstance, t string, ok bool, reason, msg string) {
	setCondition(vmi, t, ok, reason, msg)
}
