package qemu

import (
	"context"
	"time"
)

// undo runs a QMP undo command (an internal/revert step) with its own short deadline and logs a failure.
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
