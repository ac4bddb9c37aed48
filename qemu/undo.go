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

// hotplugTimeout bounds a hotplug's QMP sequence once it has begun (see committed).
const hotplugTimeout = 30 * time.Second

// committed is the context a hotplug's QMP sequence runs under: not ended by the caller's
// cancellation, bounded by hotplugTimeout. A caller that goes away mid-way (a node agent
// SIGKILLed after blockdev-add, whose RPC the launcher then sees cancelled) would otherwise end
// the sequence with a command in flight that the undo cannot see: QEMU completes it after the
// undo ran, the half-made device stays, and every later try of the same id fails with
// "Duplicate nodes". Completed, the device is recorded and the caller's next look finds it.
func committed(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), hotplugTimeout)
}
