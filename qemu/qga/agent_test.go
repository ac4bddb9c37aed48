package qga_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qga/qgatest"
	"github.com/vmlet/vmlet/qemu/qmp"
)

func fakeAgent(t *testing.T, opts qgatest.Options) *qgatest.Agent {
	t.Helper()
	ag := qgatest.New(opts)
	t.Cleanup(func() { _ = ag.Close() })
	return ag
}

func connect(t *testing.T, ag *qgatest.Agent, opts qga.Options) *qga.Agent {
	t.Helper()
	a := qga.New(ag.Pipe(), opts)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func names(reqs []qgatest.Request) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.Name)
	}
	return out
}

func TestFirstRequestSyncs(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	a := connect(t, ag, qga.Options{})
	// Leftovers of an earlier client sit in the stream before we ever speak.
	if err := ag.Inject([]byte(`{"return": {"version": "stale"}, "id": "old-client-1"}` + "\n" + "garbage\n")); err != nil {
		t.Fatal(err)
	}
	if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	info, err := a.Info(ctxT(t, 5*time.Second))
	if err != nil || info.Version != "7.2.22" || !info.Supports("guest-ping") || info.Supports("guest-nope") {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	reqs := ag.Requests()
	if got := strings.Join(names(reqs), ","); got != "guest-sync-delimited,guest-ping,guest-info" {
		t.Fatalf("requests = %s, want one sync then the commands", got)
	}
	if !reqs[0].Delimited {
		t.Error("guest-sync-delimited not preceded by 0xFF")
	}
	var id1, id2 string
	if json.Unmarshal(reqs[1].ID, &id1) != nil || json.Unmarshal(reqs[2].ID, &id2) != nil || id1 == "" || id1 == id2 {
		t.Errorf("command ids %s, %s: want distinct string ids", reqs[1].ID, reqs[2].ID)
	}
}

func TestStaleRepliesAfterTimeoutAreDiscarded(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	calls := 0
	var mu sync.Mutex
	ag.Handle("guest-get-osinfo", func(json.RawMessage) (any, *qgatest.Error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return map[string]string{"id": "answer-" + string(rune('0'+calls))}, nil
	})
	var tapped []qmp.Record
	a := connect(t, ag, qga.Options{Tap: func(r qmp.Record) { tapped = append(tapped, r) }})
	if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}

	// The agent goes away (guest reboots); a request times out unanswered.
	ag.Hold()
	_, err := a.OSInfo(ctxT(t, 100*time.Millisecond))
	if !errors.Is(err, qga.ErrTimeout) {
		t.Fatalf("OSInfo while the agent is down = %v, want ErrTimeout", err)
	}
	// The agent comes back and answers the old request: that answer ("answer-1") is stale.
	ag.Release()
	os, err := a.OSInfo(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatalf("OSInfo after the agent came back: %v", err)
	}
	if os.ID != "answer-2" {
		t.Fatalf("OSInfo = %q, want answer-2 (answer-1 was the reply to the timed-out request)", os.ID)
	}
	reqs := ag.Requests()
	if got := strings.Join(names(reqs), ","); got != "guest-sync-delimited,guest-ping,guest-get-osinfo,guest-sync-delimited,guest-get-osinfo" {
		t.Fatalf("requests = %s, want a resync before the request after the timeout", got)
	}
	discarded := 0
	for _, r := range tapped {
		if r.Dir == qmp.Received && r.Kind == qmp.KindUnknown && bytes.Contains(r.Raw, []byte("answer-1")) {
			discarded++
		}
	}
	if discarded != 1 {
		t.Errorf("stale reply tapped as discarded %d times, want 1", discarded)
	}
}

func TestStaleSyncReplySkipped(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	a := connect(t, ag, qga.Options{})
	// The agent is down before the first request: the sync itself times out...
	ag.Hold()
	if err := a.Ping(ctxT(t, 100*time.Millisecond)); !errors.Is(err, qga.ErrTimeout) {
		t.Fatalf("Ping while the agent is down = %v, want ErrTimeout", err)
	}
	// ...and is answered later: 0xFF + its old sync id, which must not complete the new sync.
	ag.Release()
	if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Ping after the agent came back: %v", err)
	}
	syncs, err := ag.WaitRequests(ctxT(t, 5*time.Second), "guest-sync-delimited", 2)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(syncs[0].Args, syncs[1].Args) {
		t.Errorf("two syncs used the same id %s", syncs[0].Args)
	}
}

func TestForeignIDDiscardedAndNoEchoAccepted(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	ag.Handle("guest-get-users", func(json.RawMessage) (any, *qgatest.Error) {
		// A reply to someone else's command arrives right before ours.
		_ = ag.Inject([]byte(`{"return": [{"user": "intruder", "login-time": 1}], "id": "other"}` + "\n"))
		return []map[string]any{{"user": "root", "login-time": 1700000000.5}}, nil
	})
	a := connect(t, ag, qga.Options{})
	users, err := a.Users(ctxT(t, 5*time.Second))
	if err != nil || len(users) != 1 || users[0].Name != "root" || users[0].LoginTime != 1700000000.5 {
		t.Fatalf("Users = %+v, %v; want root only", users, err)
	}

	old := fakeAgent(t, qgatest.Options{NoEchoID: true})
	b := connect(t, old, qga.Options{})
	if err := b.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Ping against an agent that does not echo ids: %v", err)
	}
}

func TestErrorClassAndLargeReply(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	ag.Handle("guest-get-fsinfo", func(json.RawMessage) (any, *qgatest.Error) {
		return nil, &qgatest.Error{Class: "GenericError", Desc: "failed to open /proc/self/mountinfo"}
	})
	big := strings.Repeat("b", 1<<20)
	ag.Handle("guest-network-get-interfaces", func(json.RawMessage) (any, *qgatest.Error) {
		return []map[string]any{{"name": big}}, nil
	})
	a := connect(t, ag, qga.Options{})
	_, err := a.FSInfo(ctxT(t, 5*time.Second))
	var qe *qga.Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Fatalf("FSInfo = %v, want a GenericError reply", err)
	}
	if !errors.As(a.Execute(ctxT(t, 5*time.Second), "guest-nope", nil, nil), &qe) || qe.Class != "CommandNotFound" {
		t.Fatalf("unknown command: want CommandNotFound")
	}
	ifs, err := a.NetworkInterfaces(ctxT(t, 10*time.Second))
	if err != nil || len(ifs) != 1 || ifs[0].Name != big {
		t.Fatalf("1 MiB reply: %d interfaces, %v", len(ifs), err)
	}
}

func TestDisconnect(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	a := connect(t, ag, qga.Options{})
	if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	ag.Hold()
	done := make(chan error, 1)
	go func() { done <- a.Ping(ctxT(t, time.Minute)) }()
	if _, err := ag.WaitRequests(ctxT(t, 5*time.Second), "guest-ping", 1); err != nil {
		t.Fatal(err)
	}
	if err := ag.CloseConn(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, qga.ErrDisconnected) {
			t.Fatalf("Ping pending at disconnect = %v, want ErrDisconnected", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending Ping did not return after the connection closed")
	}
	if err := a.Ping(ctxT(t, 5*time.Second)); !errors.Is(err, qga.ErrDisconnected) {
		t.Fatalf("Ping after disconnect = %v, want ErrDisconnected", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCancelUnblocksAndCloseFails(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	sent := make(chan struct{}, 10)
	a := connect(t, ag, qga.Options{Tap: func(r qmp.Record) {
		if r.Dir == qmp.Sent {
			sent <- struct{}{}
		}
	}})
	ag.Hold()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Ping(ctx) }()
	<-sent // the sync is on its way; the unanswered Ping blocks until cancelled
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errors.Is(err, qga.ErrTimeout) {
			t.Fatalf("Ping after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel did not unblock Ping")
	}
	ag.Release()
	if err := a.Ping(ctxT(t, 5*time.Second)); err != nil {
		t.Fatalf("Ping after a cancelled one: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Ping(ctxT(t, 5*time.Second)); !errors.Is(err, qga.ErrDisconnected) || !errors.Is(err, qga.ErrClosed) {
		t.Fatalf("Ping after Close = %v, want ErrDisconnected and ErrClosed", err)
	}
}

func TestConcurrentRequestsSerialized(t *testing.T) {
	ag := fakeAgent(t, qgatest.Options{})
	ag.Handle("echo", func(args json.RawMessage) (any, *qgatest.Error) { return args, nil })
	a := connect(t, ag, qga.Options{})
	ctx := ctxT(t, 30*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 10 {
		wg.Go(func() {
			for i := range 10 {
				var out struct{ W, I int }
				if err := a.Execute(ctx, "echo", map[string]int{"w": w, "i": i}, &out); err != nil {
					errs <- err
					return
				}
				if out.W != w || out.I != i {
					errs <- errors.New("got another request's reply")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
