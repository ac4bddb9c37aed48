package launcher

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qga/qgatest"
	"github.com/vmlet/vmlet/qemu/qmp"
)

func TestPingVerdict(t *testing.T) {
	for _, c := range []struct {
		err  error
		want verdict
	}{
		{nil, agentAnswers},
		{fmt.Errorf("execute guest-ping: %w", qga.ErrBusy), agentBusy},
		{fmt.Errorf("%w: %q after 2s", qga.ErrTimeout, "guest-ping"), agentSilent},
		{fmt.Errorf("execute guest-ping: %w", qga.ErrDisconnected), agentSilent},
		{errors.New("dial guest agent socket: connection refused"), agentSilent},
	} {
		if got := pingVerdict(c.err); got != c.want {
			t.Errorf("pingVerdict(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// fakeGuest is a scripted qemu-ga for the launcher's guest RPCs: guest-exec starts pids 42,
// 43, ...; a process exits when exit(pid) is called; guest-exec-status of a pid it did not
// start, or whose exit it reported already, is an error reply, as in qemu-ga. guest-get-fsinfo blocks between stall
// and unstall (a synchronous command that takes long, as on a guest with a hung mount).
type fakeGuest struct {
	*qgatest.Agent
	mu      sync.Mutex
	next    int
	exited  map[int]bool  // pid → exited, for the pids it runs
	polls   int           // guest-exec-status requests
	stalled chan struct{} // non-nil: guest-get-fsinfo waits until it is closed
}

func newFakeGuest(t *testing.T) *fakeGuest {
	f := &fakeGuest{Agent: qgatest.New(qgatest.Options{}), next: 42, exited: map[int]bool{}}
	t.Cleanup(func() { _ = f.Close() })
	ok := func(v any) qgatest.Handler { return func(json.RawMessage) (any, *qgatest.Error) { return v, nil } }
	f.Handle("guest-get-osinfo", ok(map[string]string{"id": "debian", "kernel-release": "6.1"}))
	f.Handle("guest-get-host-name", ok(map[string]string{"host-name": "vmlet-guest"}))
	f.Handle("guest-network-get-interfaces", ok([]map[string]string{{"name": "lo"}}))
	f.Handle("guest-get-users", ok([]any{}))
	f.Handle("guest-get-fsinfo", func(json.RawMessage) (any, *qgatest.Error) {
		f.mu.Lock()
		stalled := f.stalled
		f.mu.Unlock()
		if stalled != nil {
			<-stalled
		}
		return []any{}, nil
	})
	f.Handle("guest-exec", func(json.RawMessage) (any, *qgatest.Error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.exited[f.next]; !ok { // exit(pid) may come first
			f.exited[f.next] = false
		}
		f.next++
		return map[string]int{"pid": f.next - 1}, nil
	})
	f.Handle("guest-exec-status", func(args json.RawMessage) (any, *qgatest.Error) {
		var p struct{ PID int }
		_ = json.Unmarshal(args, &p)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.polls++
		exited, ok := f.exited[p.PID]
		switch {
		case !ok:
			return nil, &qgatest.Error{Class: "GenericError", Desc: "Invalid parameter 'pid'"}
		case !exited:
			return map[string]any{"exited": false}, nil
		}
		delete(f.exited, p.PID) // qemu-ga frees a process's record once it reported the exit
		return map[string]any{"exited": true, "exitcode": 0, "out-data": base64.StdEncoding.EncodeToString([]byte("slept\n"))}, nil
	})
	return f
}

func (f *fakeGuest) stall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = make(chan struct{})
}

func (f *fakeGuest) unstall() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.stalled)
	f.stalled = nil
}

func (f *fakeGuest) exit(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exited[pid] = true
}

// poller returns an agent poller connected to f with the launcher's options, agent up.
func (f *fakeGuest) poller(t *testing.T, tap func(qmp.Record)) *agentPoller {
	opts := agentOptions()
	opts.Tap = tap
	c := qga.New(f.Pipe(), opts)
	t.Cleanup(func() { _ = c.Close() })
	l := &Launcher{log: slog.New(slog.DiscardHandler), events: newEventLog()}
	d := &domain{l: l, agentUp: true}
	return &agentPoller{d: d, conn: c, up: true, log: slog.New(slog.DiscardHandler), kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

func kicked(a *agentPoller) bool {
	select {
	case <-a.kick:
		return true
	default:
		return false
	}
}

func ping(ctx context.Context, g *qga.Agent) error { return g.Ping(ctx) }

// TestAgentCommandDeadlines: every command the guest RPCs send has an explicit deadline.
func TestAgentCommandDeadlines(t *testing.T) {
	f := newFakeGuest(t)
	f.exit(42)
	var mu sync.Mutex
	sent := map[string]bool{}
	a := f.poller(t, func(r qmp.Record) {
		var req struct{ Execute string }
		if r.Dir == qmp.Sent && json.Unmarshal(r.Raw, &req) == nil {
			mu.Lock()
			sent[req.Execute] = true
			mu.Unlock()
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := a.use(ctx, func(ctx context.Context, g *qga.Agent) error {
		if err := g.Ping(ctx); err != nil {
			return err
		}
		if _, err := guestInfo(ctx, g); err != nil {
			return err
		}
		_, err := guestExec(ctx, g, &pb.GuestExecRequest{Path: "/bin/true"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	delete(sent, "guest-sync-delimited") // runs within the deadline of the command it precedes
	if len(sent) != len(agentCommandTimeouts) {
		t.Errorf("the guest RPCs sent %d commands, the deadline table has %d: %v", len(sent), len(agentCommandTimeouts), sent)
	}
	for cmd := range sent {
		if _, ok := agentCommandTimeouts[cmd]; !ok {
			t.Errorf("%s has no entry in agentCommandTimeouts", cmd)
		}
	}
}

// TestUseDuringLongExec: while a GuestExec waits for a 10 s guest process, pings and GuestInfo
// through use are answered at once (fake clock), nothing reports the agent failing, and the
// exec returns the process's output.
func TestUseDuringLongExec(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGuest(t)
		a := f.poller(t, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		type result struct {
			st  qga.ExecStatus
			err error
		}
		done := make(chan result, 1)
		go func() {
			var st qga.ExecStatus
			err := a.use(ctx, func(ctx context.Context, g *qga.Agent) (err error) {
				st, err = guestExec(ctx, g, &pb.GuestExecRequest{Path: "/bin/sleep", Args: []string{"10"}})
				return err
			})
			done <- result{st, err}
		}()
		for i := range 50 { // 10 s at one call per 200 ms
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			var err error
			if i%2 == 0 {
				err = a.use(ctx, ping)
			} else {
				err = a.use(ctx, func(ctx context.Context, g *qga.Agent) error { _, err := guestInfo(ctx, g); return err })
			}
			if err != nil || time.Since(start) != 0 {
				t.Fatalf("call %d during the exec = %v after %s, want an immediate answer", i, err, time.Since(start))
			}
		}
		f.exit(42)
		r := <-done
		if r.err != nil || string(r.st.Stdout) != "slept\n" {
			t.Fatalf("guest exec = %+v, %v", r.st, r.err)
		}
		if kicked(a) {
			t.Error("a call during a long exec reported the agent failing")
		}
	})
}

// TestExecTimeoutIsNotAgentLoss: a process outliving GuestExec's timeout is ErrExecTimeout
// with its guest pid, on the wire too; it is no sign of the agent failing.
func TestExecTimeoutIsNotAgentLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGuest(t)
		a := f.poller(t, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := a.exec(ctx, &pb.GuestExecRequest{Path: "/bin/sleep", Args: []string{"30"}})
		if !errors.Is(err, ErrExecTimeout) || errors.Is(err, ErrAgentNotConnected) || kicked(a) {
			t.Fatalf("exec past its timeout = %v (kicked %v), want ErrExecTimeout and no agent re-check", err, kicked(a))
		}
		back := fromStatus(toStatus(fmt.Errorf("guest exec /bin/sleep: %w", err)))
		re, ok := errors.AsType[*RemoteError](back)
		if !ok || !errors.Is(back, ErrExecTimeout) || re.Code != "DeadlineExceeded" || re.Metadata["pid"] != "42" {
			t.Errorf("exec timeout over the wire = %#v, want EXEC_TIMEOUT, DeadlineExceeded, pid 42", back)
		}
		if err := a.use(t.Context(), ping); err != nil {
			t.Errorf("ping after an exec timeout: %v", err)
		}
		if !a.abandoned[42] {
			t.Errorf("abandoned processes = %v, want pid 42 handed to reap", a.abandoned)
		}
	})
}

// TestReapAbandoned: reap reads the status of processes that outlived their GuestExec until
// they exited (so that qemu-ga frees them), forgets pids the agent does not know, and sends
// nothing once none is left.
func TestReapAbandoned(t *testing.T) {
	f := newFakeGuest(t)
	a := f.poller(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.use(ctx, func(ctx context.Context, g *qga.Agent) error {
		_, err := g.Exec(ctx, "/bin/sleep", nil, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a.abandon(42)
	a.abandon(99) // not a pid of this agent (it restarted, say)
	a.reap()
	if len(a.abandoned) != 1 || !a.abandoned[42] {
		t.Fatalf("after reaping a running process: abandoned = %v, want only 42", a.abandoned)
	}
	f.exit(42)
	a.reap()
	if len(a.abandoned) != 0 {
		t.Fatalf("after reaping an exited process: abandoned = %v, want none", a.abandoned)
	}
	f.mu.Lock()
	polls, left := f.polls, len(f.exited)
	f.mu.Unlock()
	a.reap()
	f.mu.Lock()
	defer f.mu.Unlock()
	if polls != 3 || f.polls != polls || left != 0 {
		t.Errorf("%d guest-exec-status polls (%d after a round with nothing left), %d records left in the agent; want 3, 3, 0",
			polls, f.polls, left)
	}
}

// TestBusyIsNotAgentLoss: a call that cannot be sent because a slow synchronous command holds
// the channel fails with ErrAgentBusy after agentQueueTimeout, without a re-check of the agent;
// a command that was sent and got no answer is ErrAgentNotConnected, reports the agent lost and
// triggers a re-check.
func TestBusyIsNotAgentLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeGuest(t)
		a := f.poller(t, nil)
		f.stall()
		slow := make(chan error, 1)
		go func() {
			slow <- a.use(t.Context(), func(ctx context.Context, g *qga.Agent) error { _, err := g.FSInfo(ctx); return err })
		}()
		synctest.Wait() // guest-get-fsinfo is running in the agent
		start := time.Now()
		err := a.use(t.Context(), ping)
		if !errors.Is(err, ErrAgentBusy) || errors.Is(err, ErrAgentNotConnected) || kicked(a) || time.Since(start) != agentQueueTimeout {
			t.Errorf("ping behind a slow command = %v after %s (kicked %v), want ErrAgentBusy after %s and no re-check",
				err, time.Since(start), kicked(a), agentQueueTimeout)
		}
		if re, _ := errors.AsType[*RemoteError](fromStatus(toStatus(err))); re == nil || re.Reason != "AGENT_BUSY" || re.Code != "Unavailable" {
			t.Errorf("busy over the wire = %#v, want AGENT_BUSY, Unavailable", re)
		}
		f.unstall()
		if err := <-slow; err != nil {
			t.Fatal(err)
		}

		f.Hold() // the agent stops answering
		err = a.use(t.Context(), ping)
		if !errors.Is(err, ErrAgentNotConnected) || !errors.Is(err, qga.ErrTimeout) || !kicked(a) {
			t.Errorf("unanswered ping = %v (kicked %v), want ErrAgentNotConnected (ErrTimeout) and a re-check", err, kicked(a))
		}
		if a.isUp() || a.d.agentUp {
			t.Errorf("after an unanswered command the agent is still reported up (poller %v, domain %v)", a.isUp(), a.d.agentUp)
		}
		if !strings.Contains(fmt.Sprint(err), "after 2s") {
			t.Errorf("unanswered ping = %v, want its 2s deadline", err)
		}
		f.Release()
	})
}
