package qemu

import (
	"context"
	"time"
)

// reverter collects undo steps of a multi-step side effect and runs them, newest first, unless
// success was called (the incus shared/revert pattern):
//
//	r := &reverter{}
//	defer r.fail()
//	... r.add(undo) after each step ...
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

// undo runs an undo command with its own short deadline and logs a failure.
func (vm *VM) undo(cmd string, args any) {
	ctx, cancel := context.WithTimeout(context.Background(), revertTimeout)
	defer cancel()
	if err := vm.execute(ctx, cmd, args, nil); err != nil {
		vm.log.Warn("undo failed", "cmd", cmd, "err", err)
	}
}

// revertTimeout bounds each undo command: undo runs after a failure, often because ctx ended,
// so it gets its own short deadline.
const revertTimeout = 5 * time.Second
