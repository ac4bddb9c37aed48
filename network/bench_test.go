package network

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPodNetworkSetup measures one launcher's network: the local-mode pod network
// (netns, veth, address, route; the node bridge already exists, as it does for every pod but
// the first) plus the masquerade binding (discover, plan, bridge, tap, sysctls, nftables,
// DHCP server). Teardown is reported as its own metrics: the fast path when the pod goes away
// (Close + DeletePod: the netns takes its links and tables with it) and the explicit one
// (Detach, then DeletePod), alternating.
//
//	go test -p 1 -run '^$' -bench PodNetworkSetup ./network/
func BenchmarkPodNetworkSetup(b *testing.B) {
	for _, binding := range []Binding{BindingMasquerade, BindingBridge} {
		b.Run(string(binding), func(b *testing.B) {
			tn := newTestNode(b)
			_, err := tn.CreatePod("keep-bridge") // the bridge exists, as on a busy node
			must(b, err)
			b.Cleanup(func() { must(b, tn.DeletePod("keep-bridge")) })
			var pod, attach, fast, explicit time.Duration
			var nFast, nExplicit int
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("bench-%d", i)
				t0 := time.Now()
				p, err := tn.CreatePod(id)
				must(b, err)
				t1 := time.Now()
				spec := masqSpec(id, Port{Port: 8080})
				if binding == BindingBridge {
					spec = bridgeSpec(id)
				}
				a, err := Attach(p.NetnsPath, spec, AttachOptions{ServeDHCP: true})
				must(b, err)
				t2 := time.Now()
				if i%2 == 0 {
					must(b, a.Close())
					must(b, tn.DeletePod(id))
					fast, nFast = fast+time.Since(t2), nFast+1
				} else {
					must(b, a.Detach())
					must(b, tn.DeletePod(id))
					explicit, nExplicit = explicit+time.Since(t2), nExplicit+1
				}
				pod, attach = pod+t1.Sub(t0), attach+t2.Sub(t1)
			}
			ms := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(max(n, 1)) / 1000 }
			b.ReportMetric(ms(pod, b.N), "pod-ms/op")
			b.ReportMetric(ms(attach, b.N), "binding-ms/op")
			b.ReportMetric(ms(fast, nFast), "teardown-close-ms/op")
			b.ReportMetric(ms(explicit, nExplicit), "teardown-detach-ms/op")
		})
	}
}

// BenchmarkStartToGuestAddress measures launcher start to "the guest's address is known":
// from opening the taps and starting QEMU (the project's driver) with the test guest until
// the in-process DHCP server acknowledged the guest's lease (the OnLease callback). TCG on a
// shared 2-core machine: expect seconds and noise; run with -benchtime=3x.
//
//	go test -p 1 -run '^$' -bench StartToGuestAddress -benchtime=3x ./network/
func BenchmarkStartToGuestAddress(b *testing.B) {
	tn := newTestNode(b)
	pod, err := tn.CreatePod("bench-vm")
	must(b, err)
	b.Cleanup(func() { must(b, tn.DeletePod("bench-vm")) })
	leases := make(chan Lease, 1)
	a, err := Attach(pod.NetnsPath, masqSpec("bench-vm"), AttachOptions{ServeDHCP: true, OnLease: func(l Lease) {
		select {
		case leases <- l:
		default:
		}
	}})
	must(b, err)
	b.Cleanup(func() { must(b, a.Detach()) })
	var total, qemuStart time.Duration
	for b.Loop() {
		select {
		case <-leases: // a stale event from the previous guest
		default:
		}
		t0 := time.Now()
		g := startGuest(b, a, "default")
		qemuStart += time.Since(t0)
		ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
		select {
		case <-leases:
		case <-ctx.Done():
			b.Fatalf("no lease: %v", ctx.Err())
		}
		cancel()
		total += time.Since(t0)
		b.StopTimer()
		kctx, kcancel := context.WithTimeout(context.Background(), opTimeout)
		must(b, g.Kill(kctx))
		kcancel()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "start-to-lease-ms/op")
	b.ReportMetric(float64(qemuStart.Milliseconds())/float64(b.N), "qemu-start-ms/op")
}
