package network

// reverter collects the undo steps of a multi-step side effect and runs them, newest first,
// unless success was called (the incus shared/revert pattern):
//
//	r := &reverter{}
//	defer r.fail()
//	... r.add(undo) after each step that changed something ...
//	r.success()
type reverter struct {
	undo []func()
	done bool
}

// add registers an undo step.
func (r *reverter) add(f func()) { r.undo = append(r.undo, f) }

// fail runs the undo steps in reverse order, unless success was called first.
func (r *reverter) fail() {
	if r.done {
		return
	}
	r.done = true
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
}

// success disarms fail.
func (r *reverter) success() { r.done = true }
