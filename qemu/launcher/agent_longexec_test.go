package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/testguest"
)

// agentCallBound bounds each guest call made while a long guest exec runs. The calls are
// short (a few ms under TCG); the bound is generous for a loaded 2-core machine, and far
// below the exec's 10 s, so a call that queues behind the exec fails.
const agentCallBound = 3 * time.Second

// bootAgentGuest starts the test guest under p and waits until it printed its READY marker and
// the launcher reported the agent connected; it returns the index of that event and the
// console connection (to type into the guest's shell).
func bootAgentGuest(t *testing.T, p *proc, rec *recorder, name string) (int, net.Conn, *testguest.Console) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	r, err := p.client.Sync(ctx, guestSpec(t, name))
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	p.qemu = int(r.GetDomain().GetPid())
	conn, err := net.Dial("unix", p.paths.ConsoleSocket())
	if err != nil {
		t.Fatalf("connect console: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	con := testguest.NewConsole(conn)
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	i, err := rec.waitEvent(ctx, 0, "agent connected", isAgent(true))
	if err != nil {
		t.Fatal(err)
	}
	return i, conn, con
}

// TestGuestAgentLongExec is issue #13 item 9, against the real guest and qemu-ga: long guest
// processes do not hold the agent, and outliving GuestExec's timeout is not agent loss. The
// subtests share the VM.
func TestGuestAgentLongExec(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	rec := watch(t, p.client, 0)
	up, conn, con := bootAgentGuest(t, p, rec, "longexec")
	t.Run("calls-during-exec", func(t *testing.T) { callsDuringExec(t, p, rec, up) })
	t.Run("exec-timeout", func(t *testing.T) { execTimeout(t, p, rec) })
	t.Run("stopped-agent", func(t *testing.T) { stoppedAgent(t, p, rec, conn, con) })
}

// callsDuringExec: a 10 s guest exec (guest-exec, then guest-exec-status polls) must not hold
// the agent. While it runs, a GuestPing or a GuestInfo (guest-info, guest-get-osinfo,
// guest-get-host-name, guest-network-get-interfaces, ...) goes out every 200 ms and each must
// be answered within agentCallBound; GetDomain must say the agent is connected throughout, and
// the event stream (what the node agent watches for the AgentConnected condition) must carry
// no "agent lost" event; the exec returns exit 0 and its output. Logs the GuestPing RTT
// (P50/P95) during the exec, and idle for comparison.
func callsDuringExec(t *testing.T, p *proc, rec *recorder, up int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var idle []time.Duration
	for range 25 {
		t0 := time.Now()
		if err := p.client.GuestPing(ctx); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, time.Since(t0))
	}
	slices.Sort(idle)
	t.Logf("guest-ping RTT through the launcher, idle: n=%d P50 %s P95 %s", len(idle), percentile(idle, 50), percentile(idle, 95))

	type result struct {
		r    *pb.GuestExecResponse
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", "sleep 10; echo slept"}, nil, time.Minute)
		done <- result{r, err, time.Since(start)}
	}()

	var pings []time.Duration // GuestPing RTTs while the exec runs
	infos := 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var res *result
	// Keep calling for a few background ping intervals (the harness pings every 1 s) after the
	// exec returned, so that a background ping queued behind the exec has been answered too.
	var after <-chan time.Time // nil until the exec returned
calls:
	for i := 0; ; i++ {
		select {
		case r := <-done:
			res, after = &r, time.After(3*time.Second)
			continue
		case <-after:
			break calls
		case <-tick.C:
		}
		callCtx, callCancel := context.WithTimeout(ctx, agentCallBound)
		t0 := time.Now()
		var err error
		if i%2 == 0 {
			err = p.client.GuestPing(callCtx)
			if res == nil {
				pings = append(pings, time.Since(t0))
			}
		} else {
			_, err = p.client.GuestInfo(callCtx)
			infos++
		}
		if err != nil {
			callCancel()
			t.Fatalf("guest call %d, %s after the exec started, failed after %s: %v", i,
				t0.Sub(start).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), err)
		}
		d, err := p.client.GetDomain(callCtx)
		callCancel()
		if err != nil || !d.GetAgentConnected() {
			t.Fatalf("GetDomain during the exec: agent_connected=%v (%v), want true", d.GetAgentConnected(), err)
		}
	}

	if res.err != nil {
		t.Fatalf("guest exec of sleep 10: %v", res.err)
	}
	if res.r.GetExitCode() != 0 || string(res.r.GetStdout()) != "slept\n" || res.took < 10*time.Second {
		t.Errorf("guest exec of sleep 10: exit %d stdout %q after %s, want exit 0, \"slept\\n\", ≥ 10 s",
			res.r.GetExitCode(), res.r.GetStdout(), res.took)
	}
	// 10 s at one call per 200 ms, alternating: ≈ 25 pings. Fewer than half means the calls
	// were held up (each waited for something) even if none failed.
	if len(pings) < 12 || infos < 12 {
		t.Errorf("%d pings and %d info calls during the exec, want ≥ 12 of each", len(pings), infos)
	}
	if slices.ContainsFunc(rec.snapshot()[up+1:], isAgent(false)) {
		t.Errorf("agent reported lost during or after a long exec; events: %s", rec.dump())
	}
	slices.Sort(pings)
	t.Logf("guest-ping RTT through the launcher during a 10 s exec: n=%d P50 %s P95 %s max %s",
		len(pings), percentile(pings, 50), percentile(pings, 95), pings[len(pings)-1])
}

// execTimeout: a guest process outliving GuestExec's timeout makes GuestExec return
// ErrExecTimeout with its guest pid promptly; the process keeps running (qemu-ga cannot kill
// it), and the agent stays connected and answering.
func execTimeout(t *testing.T, p *proc, rec *recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	from := rec.len()
	start := time.Now()
	_, err := p.client.GuestExec(ctx, "/bin/sleep", []string{"300"}, nil, 2*time.Second)
	took := time.Since(start)
	re, ok := errors.AsType[*launcher.RemoteError](err)
	if !errors.Is(err, launcher.ErrExecTimeout) || !ok || re.Metadata["pid"] == "" || took > 2*time.Second+agentCallBound {
		t.Fatalf("guest exec of sleep 300 with a 2 s timeout = %v after %s, want ErrExecTimeout with a pid, soon after 2 s", err, took)
	}
	pid := re.Metadata["pid"]
	callCtx, callCancel := context.WithTimeout(ctx, agentCallBound)
	defer callCancel()
	if err := p.client.GuestPing(callCtx); err != nil {
		t.Errorf("guest ping right after an exec timeout: %v", err)
	}
	// Still running in the guest: vmlet leaves it be. The test ends it.
	r, err := p.client.GuestExec(ctx, "/bin/sh", []string{"-c", "kill -0 " + pid + " && kill " + pid}, nil, 0)
	if err != nil || r.GetExitCode() != 0 {
		t.Errorf("guest pid %s after the exec timeout: exit %d (%v), want still running", pid, r.GetExitCode(), err)
	}
	if d, err := p.client.GetDomain(callCtx); err != nil || !d.GetAgentConnected() {
		t.Errorf("GetDomain after an exec timeout: agent_connected=%v (%v), want true", d.GetAgentConnected(), err)
	}
	if slices.ContainsFunc(rec.snapshot()[from:], isAgent(false)) {
		t.Errorf("agent reported lost after an exec timeout; events: %s", rec.dump())
	}
}

// stoppedAgent: an agent that really stops answering (qemu-ga SIGSTOPped from the console)
// is reported lost, because a ping sent to it goes unanswered; once it runs again the
// launcher resynchronises past the stale replies and reports it connected.
func stoppedAgent(t *testing.T, p *proc, rec *recorder, conn net.Conn, con *testguest.Console) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	from := rec.len()
	shell := func(cmd, marker string) {
		t.Helper()
		off := con.Len()
		// $((40+2)): the echoed command line does not contain the marker, only its output.
		if _, err := fmt.Fprintf(conn, "%s && echo %s-$((40+2))\n", cmd, marker); err != nil {
			t.Fatalf("type into the console: %v", err)
		}
		if _, err := con.WaitFrom(ctx, off, marker+"-42"); err != nil {
			t.Fatal(err)
		}
	}
	shell("kill -STOP $(pidof qemu-ga)", "VMLET-QGA-STOPPED")
	i, err := rec.waitEvent(ctx, from, "agent lost", isAgent(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.client.GuestPing(ctx); !errors.Is(err, launcher.ErrAgentNotConnected) {
		t.Errorf("guest ping while the agent is stopped = %v, want ErrAgentNotConnected", err)
	}
	shell("kill -CONT $(pidof qemu-ga)", "VMLET-QGA-RESUMED")
	if _, err := rec.waitEvent(ctx, i+1, "agent back", isAgent(true)); err != nil {
		t.Fatal(err)
	}
	callCtx, callCancel := context.WithTimeout(ctx, agentCallBound)
	defer callCancel()
	if err := p.client.GuestPing(callCtx); err != nil {
		t.Errorf("guest ping after the agent resumed: %v", err)
	}
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted ds, nearest-rank.
func percentile(ds []time.Duration, p int) time.Duration {
	i := (len(ds)*p + 99) / 100
	return ds[max(i-1, 0)]
}
