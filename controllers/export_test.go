package controllers

// PullBackOffEntries is how many VMI+image pull back-offs the agent holds.
func (r *VMIReconciler) PullBackOffEntries() int { return r.pullBackOff().Len() }
