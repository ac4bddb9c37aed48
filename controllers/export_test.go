package controllers

import vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"

// PullBackOffEntries is how many VMI+image pull back-offs the agent holds.
func (r *VMIReconciler) PullBackOffEntries() int { return r.pullBackOff().Len() }

// Workers is how many VMIs the agent reconciles at once.
const Workers = workers

// StorageOperations is how many storage operations run.
func (r *VMIReconciler) StorageOperations() int {
	return r.storageTracker().Running() + r.hotplugTracker().Running()
}

// ComputedLevel is the MCS level the agent gives a launcher it starts (selinux.go).
func ComputedLevel(vmi *vmletv1.VirtualMachineInstance, target bool) string {
	return computedLevel(vmi, target)
}

// MigrationChannels is how many parallel streams carry a migration's guest memory.
const MigrationChannels = migrationChannels
