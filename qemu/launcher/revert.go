package launcher

// reverter collects undo steps of a multi-step side effect and runs them newest first unless
// success was called (incus shared/revert):
//
//	r := &reverter{}
//	defer r.fail()
//	... r.add(undo) after each step ...
//	r.success()
type reverter struct {
	undo []func()
	done bool
}

func (r *reverter) add(f func()) { r.undo = append(r.undo, f) }

func (r *reverter) fail() {
	if r.done {
		return
	}
	r.done = true
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
}

func (r *reverter) success() { r.done = true }
