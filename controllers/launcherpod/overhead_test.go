package launcherpod_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// The overhead measurement behind launcherpod.MemoryOverhead: boot the test guest under QEMU
// the way the node agent does (TCG, tb-size, serial, guest agent channel, SCSI controller,
// hotplug ports, memory balloon) and split QEMU's RSS into guest RAM, TCG translation cache
// and the rest.
//
//	go test -run '^$' -bench QEMUOverhead -benchtime 1x ./controllers/launcherpod/
//
// TestQEMUOverheadWithinFormula repeats one point of it as a check.

const (
	bootDeadline = 3 * time.Minute
	tcgCacheMiB  = launcherpod.DefaultTCGCacheMiB // the node agent's default (--tcg-cache-mib)
)

// qemuMemory is QEMU's memory split by mapping (bytes).
type qemuMemory struct {
	rss, guestRAM, tcg, pte int64
}

// overhead is what QEMU uses beyond the guest's RAM, translation cache included.
func (m qemuMemory) overhead() int64 { return m.rss - m.guestRAM }

func TestQEMUOverheadWithinFormula(t *testing.T) {
	m := measure(t, 256, 2)
	formula := launcherpod.QEMUOverhead(256<<20, 2, tcgCacheMiB)
	t.Logf("QEMU RSS %s: guest RAM %s, TCG cache %s, overhead %s (page tables %s); formula %s",
		mib(m.rss), mib(m.guestRAM), mib(m.tcg), mib(m.overhead()), mib(m.pte), mib(formula))
	if got := m.overhead() + m.pte; got > formula {
		t.Errorf("QEMU overhead %s (incl. page tables) exceeds the formula's %s: re-measure (BenchmarkQEMUOverhead) and update MemoryOverhead", mib(got), mib(formula))
	}
}

// BenchmarkQEMUOverhead reports QEMU's overhead beyond guest RAM for several vCPU counts and
// guest sizes, next to the formula's QEMU part.
func BenchmarkQEMUOverhead(b *testing.B) {
	for _, c := range []struct{ memMiB, vcpus int }{{256, 1}, {256, 2}, {256, 8}, {1024, 1}} {
		b.Run(fmt.Sprintf("mem=%d/vcpus=%d", c.memMiB, c.vcpus), func(b *testing.B) {
			var m qemuMemory
			for b.Loop() {
				m = measure(b, c.memMiB, c.vcpus)
			}
			b.ReportMetric(float64(m.rss)/(1<<20), "qemu-rss-MiB")
			b.ReportMetric(float64(m.guestRAM)/(1<<20), "guest-ram-MiB")
			b.ReportMetric(float64(m.tcg)/(1<<20), "tcg-MiB")
			b.ReportMetric(float64(m.pte)/(1<<20), "pte-MiB")
			b.ReportMetric(float64(m.overhead())/(1<<20), "overhead-MiB")
			b.ReportMetric(float64(launcherpod.QEMUOverhead(int64(c.memMiB)<<20, int64(c.vcpus), tcgCacheMiB))/(1<<20), "formula-MiB")
		})
	}
}

// measure boots the test guest until its READY marker, lets it settle in a busy loop of guest
// agent pings, and reads QEMU's memory.
func measure(t testing.TB, memMiB, vcpus int) qemuMemory {
	t.Helper()
	bin := prereq.QEMU(t)
	prereq.Root(t)
	files := testguest.Assets(t)
	dir, err := os.MkdirTemp("/tmp", "vlp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	spec := &qemu.Spec{
		Name:         "overhead",
		MemoryMiB:    memMiB,
		TCGCacheMiB:  tcgCacheMiB,
		CPU:          qemu.CPU{Cores: vcpus},
		Boot:         qemu.Boot{Kernel: files.Kernel, Initrd: files.Initrd, Cmdline: testguest.BaseCmdline},
		Serial:       &qemu.Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")},
		Agent:        &qemu.Agent{Socket: filepath.Join(dir, "qga.sock")},
		SCSI:         true,
		HotplugPorts: 4,
		StartPaused:  true,
		// The balloon and display translation adds by default (autoattachMemBalloon,
		// autoattachGraphicsDevice).
		Balloon:  &qemu.Balloon{StatsPeriodSeconds: 10, FreePageReporting: true},
		Graphics: &qemu.Graphics{Socket: filepath.Join(dir, "vnc.sock")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	var logs bytes.Buffer
	vm, err := qemu.Start(ctx, spec, qemu.StartOptions{
		Binary: bin, Accel: &accel.Decision{Accel: accel.TCG, Reason: "measurement under TCG"},
		QMPSocket: filepath.Join(dir, "qmp.sock"), Stderr: &logs,
	})
	if err != nil {
		t.Fatalf("start qemu: %v\n%s", err, logs.String())
	}
	defer func() {
		kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
		defer kcancel()
		if err := vm.Kill(kctx); err != nil {
			t.Errorf("kill qemu: %v", err)
		}
	}()
	conn, err := net.Dial("unix", spec.Serial.Socket)
	if err != nil {
		t.Fatalf("dial serial: %v", err)
	}
	defer conn.Close()
	con := testguest.NewConsole(conn)
	if err := vm.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatalf("guest not ready: %v\n%s", err, con.String())
	}
	return readMemory(t, vm.Info().PID, memMiB)
}

// readMemory splits pid's RSS (/proc/<pid>/smaps) into the guest RAM mapping (the anonymous
// mapping of the guest's size), the TCG translation cache (the anonymous rwx mappings: QEMU 7.2
// cuts tb-size into 2 MiB regions) and the rest;
// page tables are VmPTE of /proc/<pid>/status.
func readMemory(t testing.TB, pid, memMiB int) qemuMemory {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m qemuMemory
	var size int64
	var perms, path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header line
			perms, path = fields[1], ""
			if len(fields) > 5 {
				path = fields[5]
			}
			continue
		}
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Size:":
			size = kb << 10
		case "Rss:":
			rss := kb << 10
			m.rss += rss
			guest := int64(memMiB) << 20
			switch {
			case path == "" && size >= guest && size <= guest+16<<20:
				m.guestRAM += rss
			case perms == "rwxp" && path == "":
				// TCG's code buffer: one rwx region per vCPU thread group, with guard pages.
				m.tcg += rss
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmPTE:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			m.pte = kb << 10
		}
	}
	if m.guestRAM == 0 {
		t.Fatalf("no guest RAM mapping of %d MiB found in pid %d's smaps", memMiB, pid)
	}
	return m
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
