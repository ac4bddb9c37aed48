package main

import (
	"context"
	"fmt"
	"time"
)

// pauseCycles is the number of pause + resume cycles per mode and round.
const pauseCycles = 20

// phasePause boots one guest per mode, then times pause + resume (two round trips, each
// returning once the stack says the state changed) in cycles that rotate the modes: launcher
// Pause + Unpause RPCs, libvirt DomainSuspend + DomainResume, raw QMP stop + cont.
func (b *bench) phasePause(ctx context.Context) error {
	modes := []stack{b.vmlet, b.libvirt, b.bare}
	vms := make([]vm, len(modes))
	defer func() {
		for _, v := range vms {
			if v != nil {
				b.cleanupErr(v.stop(context.WithoutCancel(ctx)))
			}
		}
	}()
	for i, s := range modes {
		v, err := bootVM(ctx, s, b.guest("sbs-pause-"+s.name()))
		if err != nil {
			return fmt.Errorf("boot %s for pause: %w", s.name(), err)
		}
		vms[i] = v
	}
	rtt := map[string][]float64{}
	for r := range b.rounds {
		for c := range pauseCycles {
			for _, i := range RoundOrder(len(modes), r*pauseCycles+c) {
				t0 := time.Now()
				if err := vms[i].pause(ctx); err != nil {
					return fmt.Errorf("pause %s: %w", modes[i].name(), err)
				}
				if err := vms[i].resume(ctx); err != nil {
					return fmt.Errorf("resume %s: %w", modes[i].name(), err)
				}
				rtt[modes[i].name()] = append(rtt[modes[i].name()], ms(time.Since(t0)))
			}
		}
		line := ""
		for _, s := range modes {
			x := rtt[s.name()]
			line += fmt.Sprintf("%s %.2f ms  ", s.name(), Summarize(x[len(x)-pauseCycles:]).Median)
		}
		b.progress("pause", r, "median of %d cycles: %s", pauseCycles, line)
	}
	b.res.Comparisons = append(b.res.Comparisons, newComparison("pause-rtt", "Pause + resume round trip", "ms", "cycle",
		fmt.Sprintf("One booted, idle guest per mode; %d rounds × %d cycles, the modes rotating every cycle. "+
			"vmlet: Pause + Unpause RPCs (each returns once QEMU's state changed). libvirt: DomainSuspend + DomainResume. "+
			"bare: raw QMP stop + cont on the same kind of socket.", b.rounds, pauseCycles),
		[]string{modeVmlet, modeLibvirt, modeBare}, rtt))
	return nil
}
