package devices

// revert collects undo steps of a multi-step change and runs them, newest first, unless the
// change succeeded (the incus revert habit):
//
//	var undo revert
//	defer undo.fail()
//	…; undo.add(func() { … })
//	undo.success()
type revert []func()

func (r *revert) add(f func()) { *r = append(*r, f) }

// fail runs the undo steps in reverse order; after success it does nothing.
func (r *revert) fail() {
	for i := len(*r) - 1; i >= 0; i-- {
		(*r)[i]()
	}
	*r = nil
}

// success drops the undo steps.
func (r *revert) success() { *r = nil }
