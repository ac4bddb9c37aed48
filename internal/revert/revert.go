package revert

import (
	"errors"
	"fmt"
)

// Reverter collects undo steps. The zero value is ready to use; New returns one. Once Fail ran
// or Success was called it is spent: steps added later never run.
type Reverter struct {
	undo []func() error
	done bool // Fail ran or Success was called
}

// New returns an empty Reverter.
func New() *Reverter { return &Reverter{} }

// Add registers an undo step that cannot fail or handles its own failure (logs it).
func (r *Reverter) Add(f func()) {
	r.undo = append(r.undo, func() error { f(); return nil })
}

// AddErr registers an undo step whose error FailErr returns.
func (r *Reverter) AddErr(f func() error) { r.undo = append(r.undo, f) }

// Fail runs the undo steps, newest first, unless Success was called or Fail already ran. Every
// step runs even when an earlier one failed; the errors of AddErr steps are dropped (see
// FailErr).
func (r *Reverter) Fail() { _ = r.run() }

// FailErr is Fail for a deferred call in a function with a named error result: the errors of
// the undo steps, each wrapped "undo: …", are joined after *err (errors.Join). When none failed
// *err is left as it was, not wrapped.
func (r *Reverter) FailErr(err *error) {
	if errs := r.run(); len(errs) > 0 {
		*err = errors.Join(append([]error{*err}, errs...)...)
	}
}

// Success disarms Fail: the operation is complete and its steps stay.
func (r *Reverter) Success() {
	r.done = true
	r.undo = nil
}

// run runs the undo steps once and returns their errors, each wrapped "undo: …".
func (r *Reverter) run() []error {
	if r.done {
		return nil
	}
	r.done = true
	undo := r.undo
	r.undo = nil
	var errs []error
	for i := len(undo) - 1; i >= 0; i-- {
		if err := undo[i](); err != nil {
			errs = append(errs, fmt.Errorf("undo: %w", err))
		}
	}
	return errs
}
