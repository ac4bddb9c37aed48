package storage

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// bootTimeout bounds a TCG boot on two busy cores (4–7 s typical); waits end on their condition.
const bootTimeout = 120 * time.Second

// guestVM is the test guest started with the qemu driver, its serial console attached.
type guestVM struct {
	*qemu.VM
	console *testguest.Console
	conn    net.Conn
	logs    *logbuf.Buffer
	n       int
}

// bootGuest starts QEMU (TCG) with the disks and kernel Apply produced, paused, attaches the
// serial console, resumes, and waits for the guest's READY marker. t.Cleanup kills QEMU.
func bootGuest(t *testing.T, res *Result, hotplugPorts int) *guestVM {
	t.Helper()
	bin := prereq.QEMU(t)
	prereq.Root(t)
	dir, err := os.MkdirTemp("/tmp", "vst") // unix socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	boot := res.Boot
	boot.Cmdline = strings.TrimSpace(testguest.BaseCmdline + " " + boot.Cmdline)
	spec := &qemu.Spec{
		Name: "storage-e2e", MemoryMiB: 256, Boot: boot, Disks: res.Disks, HotplugPorts: hotplugPorts,
		Serial:      &qemu.Serial{Socket: filepath.Join(dir, "serial.sock")},
		Agent:       &qemu.Agent{Socket: filepath.Join(dir, "qga.sock")},
		StartPaused: true,
	}
	logs := &logbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	tcg := accel.Decision{Accel: accel.TCG, Reason: "storage tests run under tcg"}
	vm, err := qemu.Start(ctx, spec, qemu.StartOptions{Binary: bin, Accel: &tcg, QMPSocket: filepath.Join(dir, "qmp.sock"),
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Stderr: logs})
	if err != nil {
		t.Fatalf("start qemu: %v\n%s", err, logs.String())
	}
	g := &guestVM{VM: vm, logs: logs}
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer kcancel()
		if _, done := vm.ExitInfo(); !done {
			if err := vm.Kill(kctx); err != nil {
				t.Errorf("kill qemu: %v", err)
			}
		}
		if g.conn != nil {
			g.conn.Close()
		}
		if t.Failed() && g.console != nil {
			t.Logf("qemu log:\n%s\nconsole:\n%s", logs.String(), g.console.String())
		}
	})
	if g.conn, err = net.Dial("unix", spec.Serial.Socket); err != nil {
		t.Fatalf("dial serial: %v", err)
	}
	g.console = testguest.NewConsole(g.conn)
	if err := vm.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := g.console.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatalf("guest not ready: %v", err)
	}
	return g
}

// sh runs cmd on the guest's root console shell and returns its output. The begin/end markers
// are computed by the shell, so the echoed command line never matches them.
func (g *guestVM) sh(t *testing.T, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g.n++
	begin, end := fmt.Sprintf("@B%d@", g.n), fmt.Sprintf("@E%d@", g.n)
	from := g.console.Len()
	if _, err := fmt.Fprintf(g.conn, "echo @B$((%d))@; %s; echo @E$((%d))@\n", g.n, cmd, g.n); err != nil {
		t.Fatalf("type %q: %v", cmd, err)
	}
	stop, err := g.console.WaitFrom(ctx, from, end)
	if err != nil {
		t.Fatalf("guest shell %q: %v", cmd, err)
	}
	out := g.console.String()[from:stop]
	i := strings.Index(out, begin)
	if i < 0 {
		t.Fatalf("guest shell %q: no begin marker in %q", cmd, out)
	}
	return strings.TrimSpace(strings.ReplaceAll(out[i+len(begin):len(out)-len(end)], "\r", ""))
}

// devBySerial maps virtio-blk serials to guest device names (vda, …).
func (g *guestVM) devBySerial(t *testing.T) map[string]string {
	t.Helper()
	out := g.sh(t, `for d in /sys/block/vd*; do echo "${d##*/} $(cat $d/serial)"; done`)
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m[f[1]] = f[0]
		}
	}
	return m
}
