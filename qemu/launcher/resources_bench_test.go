package launcher_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// benchMaxSockets bounds the sockets one benchmark guest can plug (under TCG vCPUs cannot be
// unplugged, so every round plugs a new one; a fresh guest takes over when they run out).
const benchMaxSockets = 12

// bootResourceGuest boots the hotplug test guest and waits for its agent.
func bootResourceGuest(b *testing.B, ctx context.Context, maxSockets int) *proc {
	p := startLauncher(b, launchOpts{})
	rec := watch(b, p.client, 0)
	spec := resourceSpec(b, "bench-res")
	spec.Cpu.MaxSockets = int32(maxSockets)
	syncGuest(b, p, spec)
	bootCtx, cancel := context.WithTimeout(ctx, bootDeadline)
	defer cancel()
	if _, err := rec.waitEvent(bootCtx, 0, "agent connected", isAgent(true)); err != nil {
		b.Fatal(err)
	}
	return p
}

// reportPercentiles reports P50 and P95 of ds in milliseconds.
func reportPercentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(percentile(ds, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(ds, 95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(0, "ns/op") // a round includes the guest's own polling: the percentiles say it
}

// BenchmarkCPUHotplug measures SetCPUs(+1 socket) until the guest reports the new vCPU online
// (its init onlines it; /sys/devices/system/cpu/online read through the agent every 50 ms).
func BenchmarkCPUHotplug(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	var p *proc
	sockets := benchMaxSockets
	var ds []time.Duration
	for b.Loop() {
		if sockets == benchMaxSockets {
			b.StopTimer()
			if p != nil {
				_ = p.client.Kill(ctx)
				_, _ = p.wait(ctx)
			}
			p, sockets = bootResourceGuest(b, ctx, benchMaxSockets), 1
			b.StartTimer()
		}
		t0 := time.Now()
		sockets++
		if _, err := p.client.SetCPUs(ctx, sockets); err != nil {
			b.Fatal(err)
		}
		waitGuestCPUs(b, ctx, p, sockets)
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds)
}

// BenchmarkMemoryHotplug measures SetMemory until the guest's MemTotal changed by the whole
// amount: rounds alternate plugging 256 MiB and unplugging it again (movable memory).
func BenchmarkMemoryHotplug(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	p := bootResourceGuest(b, ctx, maxSockets)
	boot, err := guestMemTotalKiB(ctx, p)
	if err != nil {
		b.Fatal(err)
	}
	var plug, unplug []time.Duration
	plugged := false
	for b.Loop() {
		t0 := time.Now()
		req, want := plugMiB, boot+plugMiB<<10
		if plugged {
			req, want = 0, boot
		}
		if _, err := p.client.SetMemory(ctx, req); err != nil {
			b.Fatal(err)
		}
		waitGuestMemTotal(b, ctx, p, want)
		if plugged {
			unplug = append(unplug, time.Since(t0))
		} else {
			plug = append(plug, time.Since(t0))
		}
		plugged = !plugged
	}
	reportPercentiles(b, plug)
	if len(unplug) > 0 {
		slices.Sort(unplug)
		b.ReportMetric(float64(percentile(unplug, 50).Microseconds())/1000, "unplug-p50-ms")
		b.ReportMetric(float64(percentile(unplug, 95).Microseconds())/1000, "unplug-p95-ms")
	}
}
