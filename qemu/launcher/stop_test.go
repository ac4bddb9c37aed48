package launcher_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestSIGTERMForcedQuit: a guest that ignores the ACPI power button (CmdlineNoACPI) gets its
// full grace period, then QEMU is told to quit: exit status ExitForced, nothing left behind.
func TestSIGTERMForcedQuit(t *testing.T) {
	const grace = 3 * time.Second
	p := startLauncher(t, launchOpts{grace: grace})
	rec := watch(t, p.client, 0)
	_, con := syncGuest(t, p, guestSpec(t, "noacpi", testguest.CmdlineNoACPI))
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline+2*time.Minute)
	defer cancel()
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	p.signal(syscall.SIGTERM)
	code, err := p.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(t0)
	if code != launcher.ExitForced {
		t.Errorf("exit code %d, want ExitForced (%d)", code, launcher.ExitForced)
	}
	if elapsed < grace {
		t.Errorf("QEMU was stopped after %s, before the %s grace period ended", elapsed, grace)
	}
	if _, err := con.WaitFrom(ctx, 0, testguest.MarkerPowerdownIgnored); err != nil {
		t.Errorf("the guest never saw the power button: %v", err)
	}
	if _, err := rec.waitEvent(ctx, 0, "forced shutoff", func(e *pb.Event) bool {
		return isState(pb.State_STATE_SHUTOFF)(e) && e.GetLifecycle().GetReason() == "forced"
	}); err != nil {
		t.Error(err)
	}
	p.assertClean(t)
}

// TestKill: the Kill RPC kills QEMU at once: ExitForced, reason "killed".
func TestKill(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	rec := watch(t, p.client, 0)
	spec := guestSpec(t, "kill")
	spec.Balloon = nil // autoattachMemBalloon: false
	syncGuest(t, p, spec)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Without a balloon nothing of it is reported (and QEMU has no such device).
	st, err := p.client.DomainStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.GetMemory(); m.GetHasBalloon() || m.GetActualBalloonBytes() != 0 || m.GetHasGuestStats() || m.GetGuestBytes() != 256<<20 {
		t.Errorf("memory without a balloon: %v, want 256 MiB guest and no balloon figures", m)
	}
	if r, err := p.client.QMP(ctx, `{"execute": "qom-list", "arguments": {"path": "/machine/peripheral"}}`); err != nil ||
		strings.Contains(r, "balloon") {
		t.Errorf("peripherals %s (%v): want no balloon", r, err)
	}
	if err := p.client.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	code, err := p.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != launcher.ExitForced {
		t.Errorf("exit code %d, want ExitForced (%d)", code, launcher.ExitForced)
	}
	if _, err := rec.waitEvent(ctx, 0, "killed", func(e *pb.Event) bool {
		return isState(pb.State_STATE_SHUTOFF)(e) && e.GetLifecycle().GetReason() == "killed"
	}); err != nil {
		t.Error(err)
	}
	if strings.Contains(p.stderr.String(), lostLog) {
		t.Errorf("the Kill RPC's own kill was counted as a lost QMP connection")
	}
	p.assertClean(t)
}

// lostLog is the launcher's log line for a QMP connection lost while the domain was meant to
// run (the event DomainStats counts in launcher.qmp_connection_losses).
const lostLog = "qmp connection lost while the domain was meant to run"

// TestQEMUDies: QEMU killed behind the launcher's back: the launcher reports a crash, exits
// ExitQEMUDied and cleans up.
func TestQEMUDies(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	rec := watch(t, p.client, 0)
	syncGuest(t, p, guestSpec(t, "dies"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := syscall.Kill(p.qemu, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, err := p.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != launcher.ExitQEMUDied {
		t.Errorf("exit code %d, want ExitQEMUDied (%d)", code, launcher.ExitQEMUDied)
	}
	i, err := rec.waitEvent(ctx, 0, "crashed", func(e *pb.Event) bool {
		return isState(pb.State_STATE_CRASHED)(e) && e.GetLifecycle().GetReason() == "crashed"
	})
	if err != nil {
		t.Fatal(err)
	}
	// The launcher says why: in the final event and in its log.
	if msg := rec.snapshot()[i].GetLifecycle().GetMessage(); !strings.Contains(msg, "signal killed") {
		t.Errorf("final event message %q does not say QEMU was killed", msg)
	}
	if !strings.Contains(p.stderr.String(), "signal killed") {
		t.Errorf("launcher log does not say QEMU was killed")
	}
	if !strings.Contains(p.stderr.String(), lostLog) {
		t.Errorf("launcher log does not count the lost QMP connection (%q)", lostLog)
	}
	// And in its end record, which the agent reads once the launcher is gone.
	if b, err := os.ReadFile(p.paths.EndRecord()); err != nil || !strings.Contains(string(b), `"code":4`) || !strings.Contains(string(b), "signal killed") {
		t.Errorf("end record %s: %q, %v; want code 4 and the signal", p.paths.EndRecord(), b, err)
	}
	p.assertClean(t)
}

// TestLauncherKilled: SIGKILL of the launcher takes QEMU with it (Pdeathsig), and a new
// launcher on the same run dir starts over its stale sockets.
func TestLauncherKilled(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	syncGuest(t, p, guestSpec(t, "killed"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p.signal(syscall.SIGKILL)
	if _, err := p.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := waitPidGone(ctx, p.qemu); err != nil {
		t.Fatalf("qemu outlived its launcher: %v", err)
	}
	if len(findSockets(t, p.runDir)) == 0 {
		t.Fatal("a SIGKILLed launcher removed its sockets?")
	}
	// The agent restarts a launcher on the same run dir: stale sockets are no obstacle.
	p2 := startLauncher(t, launchOpts{runDir: p.runDir})
	syncGuest(t, p2, guestSpec(t, "killed"))
	if err := p2.client.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if code, err := p2.wait(ctx); err != nil || code != launcher.ExitForced {
		t.Errorf("second launcher: exit %d %v, want %d", code, err, launcher.ExitForced)
	}
	p2.assertClean(t)
}
