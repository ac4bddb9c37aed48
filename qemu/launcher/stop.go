package launcher

import (
	"context"
	"fmt"
	"time"
)

// stopMargin is how long a stop sequence may take beyond the guest's grace period: quit, then
// SIGKILL and reaping (the driver bounds those at 10 s and 30 s).
const stopMargin = 45 * time.Second

// stop stops QEMU the way intent says, once: the first caller runs the sequence, later callers
// (a Shutdown RPC racing a SIGTERM) wait for QEMU's exit. It returns when QEMU is gone.
//
//   - stopShutdown: ACPI power button, wait up to grace, quit, SIGKILL (qemu.VM.Shutdown);
//   - stopKill: SIGKILL at once;
//   - stopMigrated: quit (the guest lives on at the target).
func (d *domain) stop(intent stopIntent, grace time.Duration) error {
	d.stopMu.Lock()
	first := d.intent == stopNone
	if first {
		d.intent = intent
	}
	d.stopMu.Unlock()
	if !first {
		select { // a Kill overrides a running graceful shutdown
		case <-d.exited:
		default:
			if intent == stopKill {
				_ = d.kill() // best effort; the first caller reports how the sequence ended
			}
		}
		<-d.exited
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace+stopMargin)
	defer cancel()
	var err error
	switch intent {
	case stopShutdown:
		d.l.log.Info("shutting down", "grace", grace)
		err = d.vm.Shutdown(ctx, grace)
	case stopKill:
		err = d.kill()
	case stopMigrated:
		err = d.vm.Quit(ctx)
	}
	if err != nil {
		d.l.log.Error("stop qemu", "err", err)
		_ = d.kill() // last resort; err above is what stop reports
	}
	<-d.exited
	return err
}

// kill sends SIGKILL and waits for the reap (bounded).
func (d *domain) kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), stopMargin)
	defer cancel()
	if err := d.vm.Kill(ctx); err != nil {
		return fmt.Errorf("kill qemu: %w", err)
	}
	return nil
}
