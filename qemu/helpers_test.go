package qemu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// Deadlines for QEMU tests: TCG on two busy cores is slow (boot 4–7 s when the other core is
// busy), so generous bounds; they are only upper limits, every wait ends on its condition.
const (
	bootTimeout = 90 * time.Second
	opTimeout   = 60 * time.Second
)

// guestOpts shape the test guest's spec.
type guestOpts struct {
	memoryMiB    int
	hotplugPorts int
	cmdline      string // appended to testguest.BaseCmdline
	dir          string // socket/log folder; default a fresh short one
	migratable   bool
	incoming     bool
	kvm          bool // Spec.Accel = AccelKVM with the host's real accelerator decision
	mutate       func(*Spec)
}

// guestSpec is a spec booting the test guest with a serial console (socket + log) and the
// guest agent channel, all in a fresh folder removed by t.Cleanup.
func guestSpec(t testing.TB, o guestOpts) *Spec {
	t.Helper()
	files := testguest.Assets(t)
	dir := o.dir
	if dir == "" {
		dir = shortTempDir(t, "vq")
	}
	s := &Spec{
		Name:         "test-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())),
		MemoryMiB:    max(o.memoryMiB, 256),
		Boot:         Boot{Kernel: files.Kernel, Initrd: files.Initrd, Cmdline: strings.TrimSpace(testguest.BaseCmdline + " " + o.cmdline)},
		Serial:       &Serial{Socket: filepath.Join(dir, "serial.sock"), LogFile: filepath.Join(dir, "serial.log")},
		Agent:        &Agent{Socket: filepath.Join(dir, "qga.sock")},
		HotplugPorts: o.hotplugPorts,
		Migratable:   o.migratable,
		Incoming:     o.incoming,
	}
	if o.kvm {
		s.Accel = AccelKVM
	}
	if len(s.Name) > 60 {
		s.Name = s.Name[:60]
	}
	if o.mutate != nil {
		o.mutate(s)
	}
	return s
}

// shortTempDir is a folder under /tmp short enough for unix socket paths, removed (and checked
// to hold nothing vmlet should have removed) by t.Cleanup.
func shortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(dir); !t.Failed() {
			for _, e := range ents {
				if e.Type() == os.ModeSocket {
					t.Errorf("socket %s left behind", e.Name())
				}
			}
		}
		os.RemoveAll(dir)
	})
	return dir
}

// testVM is a VM started by startGuest with its console attached.
type testVM struct {
	*VM
	spec    *Spec
	console *testguest.Console
	conn    net.Conn // serial socket connection
	logs    *logbuf.Buffer
	agentMu sync.Mutex
	qga     *qga.Agent
	stopped sync.Once
}

var tcg = accel.Decision{Accel: accel.TCG, Reason: "tests run under tcg"}

// startGuest starts spec paused, attaches the serial console, then resumes (unless the spec
// is Incoming or StartPaused), so the console sees everything from the first byte. t.Cleanup
// kills QEMU if still running and checks that it was reaped and its sockets removed.
func startGuest(t testing.TB, spec *Spec) *testVM {
	t.Helper()
	bin := prereq.QEMU(t)
	prereq.Root(t)
	logs := &logbuf.Buffer{}
	paused, wantPaused := spec.StartPaused, spec.StartPaused || spec.Incoming
	spec.StartPaused = true
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	decision := &tcg
	if spec.Accel == AccelKVM {
		decision = nil // the host's real decision (accel.Probe)
	}
	vm, err := Start(ctx, spec, StartOptions{
		Binary: bin, Accel: decision, QMPSocket: filepath.Join(filepath.Dir(spec.Serial.Socket), "qmp.sock"),
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Stderr: logs,
	})
	spec.StartPaused = paused
	if err != nil {
		t.Fatalf("Start: %v\nlogs:\n%s", err, logs.String())
	}
	tv := &testVM{VM: vm, spec: spec, logs: logs}
	t.Cleanup(func() { tv.stop(t) })
	conn, err := net.Dial("unix", spec.Serial.Socket)
	if err != nil {
		t.Fatalf("dial serial: %v", err)
	}
	tv.conn = conn
	tv.console = testguest.NewConsole(conn)
	if !wantPaused {
		if err := vm.Resume(ctx); err != nil {
			t.Fatalf("Resume: %v", err)
		}
	}
	return tv
}

// stop kills QEMU if it still runs and checks the aftermath: reaped, console closed, sockets
// and the QMP socket gone. Logs everything when the test failed. Only the first call acts.
func (tv *testVM) stop(t testing.TB) {
	tv.stopped.Do(func() { tv.doStop(t) })
}

func (tv *testVM) doStop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if tv.qga != nil {
		tv.qga.Close()
	}
	if _, done := tv.ExitInfo(); !done {
		if err := tv.Kill(ctx); err != nil {
			t.Errorf("kill: %v", err)
		}
	}
	if err := syscall.Kill(tv.Info().PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("qemu pid %d still exists after exit: %v", tv.Info().PID, err)
	}
	select {
	case <-tv.console.Done():
	case <-ctx.Done():
		t.Errorf("console still open after qemu exit")
	}
	tv.conn.Close()
	for _, p := range []string{tv.spec.Serial.Socket, tv.spec.Agent.Socket, filepath.Join(filepath.Dir(tv.spec.Serial.Socket), "qmp.sock")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed after exit: %v", p, err)
		}
	}
	if t.Failed() {
		info, _ := tv.ExitInfo()
		t.Logf("exit %+v\nvmlet log + qemu stderr:\n%s\nconsole:\n%s", info, tv.logs.String(), tv.console.String())
	}
}

// waitReady waits for the guest's READY marker.
func (tv *testVM) waitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	if err := tv.console.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatalf("guest not ready: %v", err)
	}
}

// waitExit waits for QEMU to exit and returns how.
func (tv *testVM) waitExit(t testing.TB) ExitInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := tv.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	info, _ := tv.ExitInfo()
	return info
}

// agent returns the guest-agent client, dialled on first use (after READY).
func (tv *testVM) agent(t testing.TB) *qga.Agent {
	t.Helper()
	tv.agentMu.Lock()
	defer tv.agentMu.Unlock()
	if tv.qga == nil {
		a, err := qga.Dial(ctxT(t, opTimeout), tv.spec.Agent.Socket, qga.Options{})
		if err != nil {
			t.Fatalf("dial guest agent: %v", err)
		}
		tv.qga = a
	}
	return tv.qga
}

// sh runs cmd with the guest's /bin/sh through the guest agent (guest-exec), requires exit
// status 0 and returns its trimmed standard output.
func (tv *testVM) sh(t testing.TB, cmd string) string {
	t.Helper()
	st, err := tv.agent(t).Run(ctxT(t, opTimeout), "/bin/sh", "-c", cmd)
	if err != nil {
		t.Fatalf("guest-exec %q: %v", cmd, err)
	}
	if st.ExitCode != 0 || st.Signal != 0 {
		t.Fatalf("guest-exec %q: exit %d signal %d: %s", cmd, st.ExitCode, st.Signal, st.Stderr)
	}
	return strings.TrimSpace(string(st.Stdout))
}

// guestUptime is the guest's /proc/uptime in seconds.
func (tv *testVM) guestUptime(t testing.TB) float64 {
	t.Helper()
	var up float64
	out := tv.sh(t, "cat /proc/uptime")
	if _, err := fmt.Sscan(out, &up); err != nil {
		t.Fatalf("parse uptime %q: %v", out, err)
	}
	return up
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// hostQEMUVersion is the "major.minor.micro" of the emulator on PATH, as `--version` says it.
func hostQEMUVersion(t testing.TB) string {
	t.Helper()
	v, err := Version(ctxT(t, opTimeout), DefaultBinary)
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}
