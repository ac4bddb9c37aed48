package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

const killSignal = syscall.SIGKILL

// execute runs a QMP command. Once QEMU has exited (or the monitor is gone) it returns an
// error wrapping ErrExited, so callers need not know about the monitor's errors.
func (vm *VM) execute(ctx context.Context, cmd string, args, reply any) error {
	return vm.executeWithFiles(ctx, cmd, args, reply)
}

// executeWithFiles is execute with files passed in SCM_RIGHTS (add-fd).
func (vm *VM) executeWithFiles(ctx context.Context, cmd string, args, reply any, files ...*os.File) error {
	select {
	case <-vm.proc.done:
		return fmt.Errorf("run %s: %w", cmd, ErrExited)
	default:
	}
	if err := vm.mon.ExecuteWithFiles(ctx, cmd, args, reply, files...); err != nil {
		if errors.Is(err, qmp.ErrDisconnected) {
			return fmt.Errorf("run %s: %w: %w", cmd, ErrExited, err)
		}
		return fmt.Errorf("run %s: %w", cmd, err)
	}
	return nil
}

// Status is QEMU's run state.
type Status struct {
	Running bool
	// Status is QEMU's RunState: "running", "paused", "prelaunch", "inmigrate",
	// "postmigrate", "shutdown", "guest-panicked", ...
	Status string
}

// Status reports the run state. QMP: query-status.
func (vm *VM) Status(ctx context.Context) (Status, error) {
	var st Status
	var r struct {
		Running bool   `json:"running"`
		Status  string `json:"status"`
	}
	if err := vm.execute(ctx, "query-status", nil, &r); err != nil {
		return st, err
	}
	return Status{Running: r.Running, Status: r.Status}, nil
}

// Pause stops the guest's vCPUs (its clocks stop too). QMP: stop.
func (vm *VM) Pause(ctx context.Context) error { return vm.execute(ctx, "stop", nil, nil) }

// Resume runs the guest's vCPUs. During an incoming migration it only arranges for the
// guest to run once the migration completes. QMP: cont.
func (vm *VM) Resume(ctx context.Context) error { return vm.execute(ctx, "cont", nil, nil) }

// Reset resets the guest like a reset button. QMP: system_reset.
func (vm *VM) Reset(ctx context.Context) error { return vm.execute(ctx, "system_reset", nil, nil) }

// Powerdown presses the ACPI power button; the guest decides what to do. QMP:
// system_powerdown.
func (vm *VM) Powerdown(ctx context.Context) error {
	return vm.execute(ctx, "system_powerdown", nil, nil)
}

// Quit tells QEMU to exit at once (the guest gets no say) and waits until it has. QMP: quit.
func (vm *VM) Quit(ctx context.Context) error {
	if err := vm.execute(ctx, "quit", nil, nil); err != nil && !errors.Is(err, ErrExited) {
		return err
	}
	return vm.Wait(ctx)
}

// Kill sends SIGKILL to QEMU and waits until it has been reaped. The exit is classified
// ExitCrash with Killed set.
func (vm *VM) Kill(ctx context.Context) error {
	vm.killed.Store(true)
	if err := vm.proc.signal(killSignal); err != nil {
		return fmt.Errorf("kill qemu: %w", err)
	}
	return vm.Wait(ctx)
}

// Wait waits until QEMU has exited and vmlet cleaned up after it.
func (vm *VM) Wait(ctx context.Context) error {
	select {
	case <-vm.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for qemu exit: %w", ctx.Err())
	}
}

// Shutdown stops the VM gracefully if it can: it resumes a guest paused with QMP stop (a paused
// guest cannot act on ACPI), presses the power button, waits up to grace
// for the guest to power off, then sends quit, and as a last resort SIGKILL. It returns once
// QEMU exited; ExitInfo tells which way it went. ctx bounds the whole sequence (SIGKILL is
// still sent when ctx ends).
func (vm *VM) Shutdown(ctx context.Context, grace time.Duration) error {
	select {
	case <-vm.exited:
		return nil
	default:
	}
	// A guest paused by the user cannot see the power button: run it first, so a graceful
	// shutdown stays graceful. Only "paused" (QMP stop) qualifies: a migration source in
	// "postmigrate" or a target in "inmigrate" must never run here.
	if st, err := vm.Status(ctx); err == nil && st.Status == "paused" {
		if err := vm.Resume(ctx); err != nil {
			vm.log.Warn("could not resume the paused guest before powerdown", "err", err)
		}
	}
	if err := vm.Powerdown(ctx); err != nil && !errors.Is(err, ErrExited) {
		vm.log.Warn("powerdown failed, quitting", "err", err)
	} else if vm.waitFor(ctx, grace) {
		return nil
	}
	vm.log.Info("guest did not power off in time, quitting", "grace", grace)
	if err := vm.execute(ctx, "quit", nil, nil); err == nil || errors.Is(err, ErrExited) {
		if vm.waitFor(ctx, quitGrace) {
			return nil
		}
	}
	vm.log.Warn("qemu did not quit, killing")
	vm.killed.Store(true)
	if err := vm.proc.signal(killSignal); err != nil {
		return fmt.Errorf("shutdown vm: %w", err)
	}
	if !vm.waitFor(context.Background(), killGrace) {
		return fmt.Errorf("shutdown vm: qemu pid %d survived SIGKILL for %s", vm.proc.pid(), killGrace)
	}
	return nil
}

// Shutdown's bounds after the guest's grace: quit before SIGKILL, and SIGKILL to reaping
// (SIGKILL cannot be ignored, but a process in uninterruptible sleep dies late).
const (
	quitGrace = 10 * time.Second
	killGrace = 30 * time.Second
)

// waitFor waits up to d (and ctx) for QEMU's exit; it reports whether QEMU exited.
func (vm *VM) waitFor(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-vm.exited:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}
