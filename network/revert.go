package network

import (
	"errors"
	"fmt"
)

// reverter collects the undo steps of a multi-step side effect and runs them, newest first,
// when the operation fails (the incus shared/revert pattern). Undo errors are joined to the
// operation's error, never dropped:
//
//	func op() (err error) {
//		r := &reverter{}
//		defer func() { err = r.fail(err) }()
//		... r.add(undo) after each step that changed something ...
//		r.success()
//		return nil
//	}
type reverter struct {
	undo []func() error
	done bool
}

// add registers an undo step.
func (r *reverter) add(f func() error) { r.undo = append(r.undo, f) }

// fail runs the undo steps in reverse order if err is not nil and success was not called, and
// returns err joined with their errors.
func (r *reverter) fail(err error) error {
	if r.done || err == nil {
		return err
	}
	r.done = true
	errs := []error{err}
	for i := len(r.undo) - 1; i >= 0; i-- {
		if uerr := r.undo[i](); uerr != nil {
			errs = append(errs, fmt.Errorf("undo: %w", uerr))
		}
	}
	return errors.Join(errs...)
}

// success disarms fail.
func (r *reverter) success() { r.done = true }
