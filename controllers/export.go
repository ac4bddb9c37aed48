package controllers

import vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"

// Helpers of the node agent exported for the cluster controller (controllers/cluster), so that
// both record phases and conditions the same way and name domains alike.

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

// DomainName is the name the node agent gives the VMI's domain (its Sync spec's name): a
// launcher started with --name must be given this one, or it refuses the agent's Sync.
func DomainName(vmi *vmletv1.VirtualMachineInstance) string { return domainName(vmi) }
