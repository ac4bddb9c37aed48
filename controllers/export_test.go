package controllers

// PullBackOffEntries is how many VMI+image pull back-offs the agent holds.
func (r *VMIReconciler) PullBackOffEntries() int { return r.pullBackOff().Len() }

// Workers is how many VMIs the agent reconciles at once.
const Workers = workers

// StorageOperations is how many storage operations run.
func (r *VMIReconciler) StorageOperations() int {
	return r.storageTracker().Running() + r.hotplugTracker().Running()
}
