package qemu

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// Benchmarks (numbers are reported, never asserted). Run them one at a time on a quiet machine:
//
//	go test -run '^$' -bench . -benchtime 3x ./qemu/

// BenchmarkStartToQMPReady: Start until QMP is connected and the (paused) guest is set up.
func BenchmarkStartToQMPReady(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		spec := guestSpec(b, guestOpts{hotplugPorts: 4})
		spec.StartPaused = true
		b.StartTimer()
		vm := startGuest(b, spec)
		b.StopTimer()
		vm.stop(b)
		b.StartTimer()
	}
}

// BenchmarkStartToGuestReady: Start until the guest prints its READY marker (boot under the
// host's accelerator choice as the tests use it: TCG here).
func BenchmarkStartToGuestReady(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		spec := guestSpec(b, guestOpts{})
		b.StartTimer()
		vm := startGuest(b, spec)
		vm.waitReady(b)
		b.StopTimer()
		vm.stop(b)
		b.StartTimer()
	}
}

func BenchmarkMigration256M(b *testing.B) { benchMigration(b, 256) }
func BenchmarkMigration1G(b *testing.B)   { benchMigration(b, 1024) }

// benchMigration migrates an idle guest of memMiB over a unix socket with max-bandwidth
// raised (1 GiB/s) and reports QEMU's total-time and downtime plus the switchover seen from
// outside: from the source's STOP event to the target's RESUME event.
func benchMigration(b *testing.B, memMiB int) {
	var total, down, switchover time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		src := startGuest(b, guestSpec(b, guestOpts{memoryMiB: memMiB}))
		src.waitReady(b)
		dst := startTarget(b, src)
		stop := src.Monitor().Expect(qmp.EventNamed("STOP"))
		resume := dst.Monitor().Expect(qmp.EventNamed("RESUME"))
		b.StartTimer()
		res := migration{params: MigrationParams{MaxBandwidth: 1 << 30}}.run(b, src, dst)
		b.StopTimer()
		ctx := ctxT(b, opTimeout)
		se, err := stop.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		re, err := resume.Wait(ctx)
		if err != nil {
			b.Fatal(err)
		}
		stop.Cancel()
		resume.Cancel()
		total += res.src.TotalTime
		down += res.src.Downtime
		switchover += re.Timestamp.Sub(se.Timestamp)
		n++
		src.stop(b)
		dst.stop(b)
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
	b.ReportMetric(ms(total), "total-ms")
	b.ReportMetric(ms(down), "downtime-ms")
	b.ReportMetric(ms(switchover), "stop-to-resume-ms")
	b.ReportMetric(0, "ns/op") // wall time per op includes boots: not meaningful
}

// BenchmarkStartToGuestReadyDisplay: BenchmarkStartToGuestReady without and with the display
// (Graphics: VGA + VNC, as translation adds by default), and QEMU's resident memory once the
// guest is ready (rss-MiB) and the CPU time QEMU used to get there (qemu-cpu-s). Run: go test -run '^$' -bench StartToGuestReadyDisplay -benchtime 5x ./qemu/
func BenchmarkStartToGuestReadyDisplay(b *testing.B) {
	for _, display := range []bool{false, true} {
		name := "none"
		if display {
			name = "vga"
		}
		b.Run(name, func(b *testing.B) {
			var rss, cpu float64
			for b.Loop() {
				b.StopTimer()
				spec := guestSpec(b, guestOpts{})
				if display {
					spec.Graphics = &Graphics{Socket: filepath.Join(filepath.Dir(spec.Serial.Socket), "vnc.sock")}
				}
				b.StartTimer()
				vm := startGuest(b, spec)
				vm.waitReady(b)
				b.StopTimer()
				rss += float64(vmRSSKiB(b, vm.Info().PID)) / 1024
				cpu += qemuCPUSeconds(b, vm.Info().PID)
				vm.stop(b)
				b.StartTimer()
			}
			b.ReportMetric(rss/float64(b.N), "rss-MiB")
			b.ReportMetric(cpu/float64(b.N), "qemu-cpu-s") // less sensitive to a busy host than ns/op
		})
	}
}

// vmRSSKiB is the VmRSS of pid (/proc/PID/status).
func vmRSSKiB(t testing.TB, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// qemuCPUSeconds is pid's user + system CPU time (/proc/PID/stat utime, stime; 100 ticks/s).
func qemuCPUSeconds(t testing.TB, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ") // after the command name, which may hold spaces
	f := strings.Fields(rest)
	if len(f) < 13 {
		t.Fatalf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.Atoi(f[11])
	stime, err2 := strconv.Atoi(f[12])
	if err1 != nil || err2 != nil {
		t.Fatalf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return float64(utime+stime) / 100
}
