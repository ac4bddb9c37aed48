package launcher_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/network/dhcp"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/test/testguest"
)

// Benchmarks report; they assert nothing about speed. Run serially:
//
//	go test -run '^$' -bench . -benchtime 10x -p 1 ./qemu/launcher/

// BenchmarkLauncherMemory reports the launcher process's own RSS and PSS
// (/proc/<pid>/smaps_rollup) while it runs a booted guest with the agent connected, after a
// round of RPCs (the goal is ≤ 15 MiB), its anonymous memory, QEMU's for scale, and the PSS
// when three launchers with guests run (binary pages shared). QEMU is not in the launcher's.
func BenchmarkLauncherMemory(b *testing.B) { launcherMemory(b, false) }

// BenchmarkLauncherMemoryDHCP is BenchmarkLauncherMemory with a dual-stack interface's DHCP
// served by the launcher (DHCPv4, DHCPv6 and router advertisements on sockets bound in a test
// netns and handed over, as the node agent does), which every VM with a network has.
func BenchmarkLauncherMemoryDHCP(b *testing.B) { launcherMemory(b, true) }

func launcherMemory(b *testing.B, withDHCP bool) {
	p := startLauncher(b, launchOpts{env: strings.Fields(os.Getenv("BENCH_LAUNCHER_ENV"))})
	if withDHCP {
		handOverTestDHCP(b, p)
	}
	rec := watch(b, p.client, 0)
	_, con := syncGuest(b, p, guestSpec(b, "bench-mem"))
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		b.Fatal(err)
	}
	if _, err := rec.waitEvent(ctx, 0, "agent", isAgent(true)); err != nil {
		b.Fatal(err)
	}
	var rss, pss, anon float64
	for b.Loop() {
		for range 20 {
			if _, err := p.client.GetDomain(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := p.client.DomainStats(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if err := p.client.GuestPing(ctx); err != nil {
			b.Fatal(err)
		}
		rss, pss, anon = smapsRollup(b, p.cmd.Process.Pid)
	}
	b.ReportMetric(rss/(1<<20), "rss-MiB")
	b.ReportMetric(pss/(1<<20), "pss-MiB")
	b.ReportMetric(anon/(1<<20), "anon-MiB")
	qrss, qpss, _ := smapsRollup(b, p.qemu)
	b.ReportMetric(qrss/(1<<20), "qemu-rss-MiB")
	b.ReportMetric(qpss/(1<<20), "qemu-pss-MiB")

	// Launchers on one node share the binary's pages: the PSS of one of three launchers, each
	// with a running guest, is what a VM really costs in launcher memory.
	for i := range 2 {
		o := startLauncher(b, launchOpts{env: strings.Fields(os.Getenv("BENCH_LAUNCHER_ENV"))})
		orec := watch(b, o.client, 0)
		syncGuest(b, o, guestSpec(b, "bench-mem-"+strconv.Itoa(i)))
		if _, err := orec.waitEvent(ctx, 0, "agent", isAgent(true)); err != nil {
			b.Fatal(err)
		}
	}
	_, pss3, _ := smapsRollup(b, p.cmd.Process.Pid)
	b.ReportMetric(pss3/(1<<20), "pss-of-3-MiB")
}

// handOverTestDHCP binds a dual-stack lease plan's sockets on a bridge in a fresh netns and
// hands them to p. Equivalent to: ip netns add NS; ip -n NS link add br0 type bridge; ...
func handOverTestDHCP(b *testing.B, p *proc) {
	ns := fmt.Sprintf("vmlet-bench-%d", os.Getpid())
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", ns)
	b.Cleanup(func() { run("netns", "del", ns) })
	run("-n", ns, "link", "add", "br0", "type", "bridge")
	run("-n", ns, "link", "set", "br0", "up")
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	plan := dhcp.LeasePlan{
		Name: "default",
		DHCP: dhcp.DHCPConfig{Interface: "br0", ServerAddr: netip.MustParseAddr("10.0.2.1"), ClientMAC: mac,
			ClientAddr: netip.MustParsePrefix("10.0.2.2/24"), Router: netip.MustParseAddr("10.0.2.1"), LeaseTime: time.Hour},
		DHCP6: &dhcp.DHCPv6Config{Interface: "br0", ServerMAC: mac, ClientMAC: mac,
			ClientAddr: netip.MustParsePrefix("fd10:0:2::2/120"), LeaseTime: time.Hour},
		RA: &dhcp.RAConfig{Interface: "br0", Source: netip.MustParseAddr("fe80::1"), Prefix: netip.MustParsePrefix("fd10:0:2::/120"), RouterLifetime: time.Hour},
	}
	socks, err := dhcp.ListenDHCP("/var/run/netns/"+ns, &plan)
	if err != nil {
		b.Fatal(err)
	}
	defer socks.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := launcher.HandOverDHCP(ctx, p.paths.TapSocket(), plan, socks); err != nil {
		b.Fatal(err)
	}
}

// smapsRollup reads Rss, Pss and Anonymous (bytes) of pid.
func smapsRollup(b *testing.B, pid int) (rss, pss, anon float64) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "Rss:":
			rss = v * 1024
		case "Pss:":
			pss = v * 1024
		case "Anonymous:":
			anon = v * 1024
		}
	}
	return rss, pss, anon
}

// BenchmarkSyncToRunning measures the Sync RPC on a fresh launcher until it answers with the
// domain running (QEMU exec, QMP handshake, cold plug, cont); launcher start and teardown are
// not timed.
func BenchmarkSyncToRunning(b *testing.B) {
	spec := guestSpec(b, "bench-sync")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for b.Loop() {
		b.StopTimer()
		p := startLauncher(b, launchOpts{})
		b.StartTimer()
		r, err := p.client.Sync(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		p.qemu = int(r.GetDomain().GetPid())
		if err := p.client.Kill(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := p.wait(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkPauseRTT measures one pause + resume round (two round trips) four ways in the
// same run: through the launcher API (gRPC → stop/cont, the state recorded so GetDomain agrees
// when the call returns), through qmp-debug.sock (QMP proxied by the launcher), the qemu
// package's VM.Pause/Resume on a QEMU started from the same spec without a launcher
// (driver-same-spec: the same device set), and raw QMP straight to another QEMU
// (testguest.Boot, package qmp client). api-getdomain-only is one GetDomain call: the gRPC
// floor.
func BenchmarkPauseRTT(b *testing.B) {
	// As the node agent runs it: its default log level and agent ping (the tests' harness
	// logs at debug and pings every second).
	p := startLauncher(b, launchOpts{env: strings.Fields(os.Getenv("BENCH_LAUNCHER_ENV")),
		args: []string{"--log-level", "info", "--agent-ping-interval", "5s", "--agent-retry-max", "5s"}})
	_, con := syncGuest(b, p, guestSpec(b, "bench-pause"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil { // measure an idle guest
		b.Fatal(err)
	}

	b.Run("api", func(b *testing.B) {
		for b.Loop() {
			if _, err := p.client.Pause(ctx); err != nil {
				b.Fatal(err)
			}
			if _, err := p.client.Unpause(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("api-getdomain-only", func(b *testing.B) { // the gRPC floor: no QMP at all
		for b.Loop() {
			if _, err := p.client.GetDomain(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("api-qmp-rpc", func(b *testing.B) { // gRPC + raw stop/cont, no state refresh
		for b.Loop() {
			for _, cmd := range []string{`{"execute":"stop"}`, `{"execute":"cont"}`} {
				if _, err := p.client.QMP(ctx, cmd); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("qmp-debug-sock", func(b *testing.B) {
		q := dialDebug(b, p.paths.DebugSocket())
		if _, err := q.next(ctx, "QMP"); err != nil {
			b.Fatal(err)
		}
		q.send(`{"execute":"qmp_capabilities"}`)
		if _, err := q.next(ctx, "return"); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			for _, cmd := range []string{`{"execute":"stop"}`, `{"execute":"cont"}`} {
				q.send(cmd)
				if _, err := q.next(ctx, "return"); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("driver-same-spec", func(b *testing.B) { // the same device set, no launcher: the qemu package
		root := b.TempDir()
		paths := launcher.Paths{Root: root}
		for _, d := range paths.Dirs() {
			if err := os.MkdirAll(d, 0o700); err != nil {
				b.Fatal(err)
			}
		}
		spec, _, err := launcher.SpecFromProto(guestSpec(b, "bench-pause-driver"), paths)
		if err != nil {
			b.Fatal(err)
		}
		vm, err := qemu.Start(ctx, spec, qemu.StartOptions{QMPSocket: paths.QMPSocket()})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = vm.Kill(context.Background()) }()
		for b.Loop() {
			if err := vm.Pause(ctx); err != nil {
				b.Fatal(err)
			}
			if err := vm.Resume(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-qmp", func(b *testing.B) {
		vm := testguest.Boot(b, testguest.BootOptions{})
		if err := vm.Console.Wait(ctx, testguest.MarkerReady); err != nil {
			b.Fatal(err)
		}
		mon, err := qmp.Dial(ctx, vm.QMPSocket, qmp.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer mon.Close()
		for b.Loop() {
			if err := mon.Execute(ctx, "stop", nil, nil); err != nil {
				b.Fatal(err)
			}
			if err := mon.Execute(ctx, "cont", nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
