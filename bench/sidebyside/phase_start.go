package main

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// bootTimeout bounds one guest boot to its marker (≈3–7 s under TCG on a quiet machine, over
// a minute when the two cores are shared with a dozen running guests).
const bootTimeout = 4 * time.Minute

// phaseStart: per round and mode, the untimed prepare (launcher process up; sockets bound;
// XML built), then request → domain running (Sync / DomainCreateXML / exec + QMP handshake +
// query-status) and → the guest's boot marker on the serial console, then teardown (Kill RPC /
// DomainDestroy / QMP quit, until QEMU is gone).
func (b *bench) phaseStart(ctx context.Context) error {
	modes := []stack{b.vmlet, b.libvirt, b.bare}
	running, booted, teardown := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
	for r := range b.rounds {
		for _, i := range RoundOrder(len(modes), r) {
			s := modes[i]
			g := b.guest(fmt.Sprintf("sbs-start-%s-%d", s.name(), r))
			tr, tb, td, err := startOnce(ctx, s, g)
			if err != nil {
				return fmt.Errorf("start round %d %s: %w", r+1, s.name(), err)
			}
			running[s.name()] = append(running[s.name()], ms(tr))
			booted[s.name()] = append(booted[s.name()], ms(tb))
			teardown[s.name()] = append(teardown[s.name()], ms(td))
			b.progress("start", r, "%-7s running %7.1f ms  marker %7.0f ms  teardown %6.1f ms", s.name(), ms(tr), ms(tb), ms(td))
		}
	}
	names := []string{modeVmlet, modeLibvirt, modeBare}
	b.res.Comparisons = append(b.res.Comparisons,
		newComparison("start-running", "Start: request → domain running", "ms", "round",
			"vmlet: launcher Sync RPC until it returns with the domain running (launcher process started before, untimed). "+
				"libvirt: DomainCreateXML until it returns. bare: exec QEMU (no -S) + QMP greeting + qmp_capabilities + query-status = running.",
			names, running),
		newComparison("start-marker", "Start: request → guest boot marker", "ms", "round",
			"Same start, until "+marker+" appears on the serial console socket (connected right after the start call returned).",
			names, booted),
		newComparison("teardown", "Teardown: request → QEMU gone", "ms", "round",
			"vmlet: Kill RPC until the launcher and QEMU exited. libvirt: DomainDestroy until it returned and QEMU is gone. bare: QMP quit until QEMU exited.",
			names, teardown),
	)
	return nil
}

func startOnce(ctx context.Context, s stack, g Guest) (tRun, tBoot, tDown time.Duration, err error) {
	p, err := s.prepare(ctx, g)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	v, err := p.start(ctx)
	tRun = time.Since(t0)
	if err != nil {
		return 0, 0, 0, undone(err, "discard", p.discard(ctx))
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	err = waitMarker(bctx, v.console(), marker)
	cancel()
	tBoot = time.Since(t0)
	t1 := time.Now()
	serr := v.stop(ctx)
	tDown = time.Since(t1)
	if err != nil {
		return 0, 0, 0, undone(err, "stop", serr)
	}
	return tRun, tBoot, tDown, serr
}

// bootVM starts g in s and waits for its boot marker.
func bootVM(ctx context.Context, s stack, g Guest) (vm, error) {
	p, err := s.prepare(ctx, g)
	if err != nil {
		return nil, err
	}
	v, err := p.start(ctx)
	if err != nil {
		return nil, undone(err, "discard", p.discard(ctx))
	}
	bctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	if err := waitMarker(bctx, v.console(), marker); err != nil {
		return nil, undone(err, "stop", v.stop(ctx))
	}
	return v, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// undone returns err, joined with the error of the cleanup step that followed it, if any.
func undone(err error, step string, cleanupErr error) error {
	if cleanupErr == nil {
		return err
	}
	return errors.Join(err, fmt.Errorf("%s: %w", step, cleanupErr))
}
