package main

import (
	"context"
	"fmt"
)

// memoryVMs are the VM counts the memory phase measures at.
var memoryVMs = []int{1, 10}

// phaseMemory grows vmlet and libvirt to 1 and then 10 booted guests each (boots alternate
// between the stacks) and, at each size, samples the control plane's memory in rounds: every
// round first drives every VM through the stack (pause, resume, state query) and then reads
// /proc/PID/smaps_rollup. Control plane: vmlet's launchers; libvirt's libvirtd + virtlogd.
// QEMU is reported separately. Per VM = total / VMs.
//
// An idle TCG guest costs 10–15 % of a core: each guest is paused (through its stack) once
// booted, so that the next boots do not crawl, and all are resumed before the rounds.
func (b *bench) phaseMemory(ctx context.Context) error {
	modes := []stack{b.vmlet, b.libvirt}
	vms := make([][]vm, len(modes))
	defer func() {
		for _, list := range vms {
			for _, v := range list {
				b.cleanupErr(v.stop(context.WithoutCancel(ctx)))
			}
		}
	}()
	for _, n := range memoryVMs {
		from := []int{len(vms[0]), len(vms[1])} // the guests booted (and paused) below
		for len(vms[0]) < n || len(vms[1]) < n {
			for i, s := range modes {
				if len(vms[i]) >= n {
					continue
				}
				v, err := bootVM(ctx, s, b.guest(fmt.Sprintf("sbs-mem-%s-%d", s.name(), len(vms[i]))))
				if err != nil {
					return fmt.Errorf("boot %s for memory: %w", s.name(), err)
				}
				vms[i] = append(vms[i], v)
				if err := v.pause(ctx); err != nil {
					return fmt.Errorf("pause %s after boot: %w", s.name(), err)
				}
			}
			b.progress("memory", -1, "booted %d vmlet + %d libvirt guests (target %d each)", len(vms[0]), len(vms[1]), n)
		}
		for i, list := range vms {
			for _, v := range list[from[i]:] {
				if err := v.resume(ctx); err != nil {
					return fmt.Errorf("resume %s before sampling: %w", modes[i].name(), err)
				}
			}
		}
		ctlRSS, ctlPSS, qRSS, qPSS := map[string][]float64{}, map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		for r := range b.rounds {
			for _, i := range RoundOrder(len(modes), r) {
				name := modes[i].name()
				ctl, q, err := b.sampleMemory(ctx, vms[i])
				if err != nil {
					return fmt.Errorf("memory of %s: %w", name, err)
				}
				ctlRSS[name] = append(ctlRSS[name], ctl.RSS/mib/float64(n))
				ctlPSS[name] = append(ctlPSS[name], ctl.PSS/mib/float64(n))
				qRSS[name] = append(qRSS[name], q.RSS/mib/float64(n))
				qPSS[name] = append(qPSS[name], q.PSS/mib/float64(n))
				b.progress("memory", r, "%d VMs %-7s control plane per VM RSS %6.1f MiB PSS %6.1f MiB; QEMU per VM RSS %6.1f MiB",
					n, name, ctl.RSS/mib/float64(n), ctl.PSS/mib/float64(n), q.RSS/mib/float64(n))
			}
		}
		names := []string{modeVmlet, modeLibvirt}
		method := fmt.Sprintf("%d booted, idle guests per stack; each of %d rounds drives every VM (pause, resume, state query) then reads smaps_rollup. "+
			"vmlet: the sum over its %d launcher processes; libvirt: libvirtd + virtlogd. Divided by %d.", n, b.rounds, n, n)
		b.res.Comparisons = append(b.res.Comparisons,
			newComparison(fmt.Sprintf("memory-control-rss-%d", n), fmt.Sprintf("Control-plane RSS per VM, %d VM(s)", n), "MiB", "round", method, names, ctlRSS),
			newComparison(fmt.Sprintf("memory-control-pss-%d", n), fmt.Sprintf("Control-plane PSS per VM, %d VM(s)", n), "MiB", "round", method, names, ctlPSS),
			newComparison(fmt.Sprintf("memory-qemu-rss-%d", n), fmt.Sprintf("QEMU RSS per VM, %d VM(s) (not control plane)", n), "MiB", "round",
				"The QEMU processes of the same VMs, same rounds.", names, qRSS),
			newComparison(fmt.Sprintf("memory-qemu-pss-%d", n), fmt.Sprintf("QEMU PSS per VM, %d VM(s) (not control plane)", n), "MiB", "round",
				"The QEMU processes of the same VMs, same rounds.", names, qPSS),
		)
	}
	return nil
}

const mib = 1 << 20

// sampleMemory drives every VM once through its stack and returns the control plane's and
// QEMU's total memory.
func (b *bench) sampleMemory(ctx context.Context, vms []vm) (ctl, q memUsage, err error) {
	var ctlPIDs, qemuPIDs []int
	for _, v := range vms {
		if err := v.pause(ctx); err != nil {
			return ctl, q, err
		}
		if err := v.resume(ctx); err != nil {
			return ctl, q, err
		}
		if err := v.state(ctx); err != nil {
			return ctl, q, err
		}
		ctlPIDs = append(ctlPIDs, v.controlPIDs()...)
		pid := v.qemuPID()
		if pid == 0 {
			return ctl, q, fmt.Errorf("sample memory: no qemu pid for a vm")
		}
		qemuPIDs = append(qemuPIDs, pid)
	}
	if _, isLibvirt := vms[0].(*libvirtVM); isLibvirt {
		d, err := b.lv.daemonPIDs()
		if err != nil {
			return ctl, q, err
		}
		ctlPIDs = d
	}
	if ctl, err = sumMem(ctlPIDs); err != nil {
		return ctl, q, err
	}
	q, err = sumMem(qemuPIDs)
	return ctl, q, err
}
