package qga_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/qemu/qga/qgatest"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// These tests run in a synctest bubble: time is the bubble's fake clock, and synctest.Wait
// returns once every goroutine is blocked (the fake agent inside a handler, the client reading
// its reply, a request waiting in line), so "the ping has waited 5 s in line" is exact and
// costs no real time. The fake agent, like qemu-ga, handles one request at a time: a handler
// blocked on a channel is a long synchronous command (guest-fsfreeze-freeze).

// slowAgent is a fake whose guest-fsfreeze-freeze answers only once release is closed.
func slowAgent(t *testing.T) (ag *qgatest.Agent, release chan struct{}) {
	ag = fakeAgent(t, qgatest.Options{})
	release = make(chan struct{})
	ag.Handle("guest-fsfreeze-freeze", func(json.RawMessage) (any, *qgatest.Error) {
		<-release
		return 1, nil
	})
	return ag, release
}

// goDo runs f in a goroutine and returns its error on a channel.
func goDo(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// TestDeadlineStartsWhenSent: a ping queued behind a long command that legitimately runs is
// not failed by the time it waited in line; its own deadline starts when it is sent.
func TestDeadlineStartsWhenSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag, release := slowAgent(t)
		a := connect(t, ag, qga.Options{CommandTimeouts: map[string]time.Duration{
			"guest-ping": time.Second, "guest-fsfreeze-freeze": time.Minute,
		}})
		if err := a.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		freeze := goDo(func() error { return a.Execute(t.Context(), "guest-fsfreeze-freeze", nil, nil) })
		synctest.Wait() // the agent is inside guest-fsfreeze-freeze
		ping := goDo(func() error { return a.Ping(t.Context()) })
		synctest.Wait()             // the ping waits in line
		time.Sleep(5 * time.Second) // fake clock: five times the ping's own deadline
		close(release)
		if err := <-freeze; err != nil {
			t.Fatalf("guest-fsfreeze-freeze: %v", err)
		}
		if err := <-ping; err != nil {
			t.Fatalf("ping queued 5 s behind a running command = %v; its 1 s deadline must start when it is sent", err)
		}
		if got := strings.Join(names(ag.Requests()), ","); got != "guest-sync-delimited,guest-ping,guest-fsfreeze-freeze,guest-ping" {
			t.Errorf("requests = %s, want no resync (nothing timed out)", got)
		}
	})
}

// TestQueueWaitIsBusyNotTimeout: a request that cannot get the channel within QueueTimeout (or
// its context's deadline) fails with ErrBusy, not ErrTimeout, is never sent, and leaves the
// stream synchronised; a cancelled wait is context.Canceled.
func TestQueueWaitIsBusyNotTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag, release := slowAgent(t)
		a := connect(t, ag, qga.Options{QueueTimeout: 3 * time.Second, CommandTimeouts: map[string]time.Duration{
			"guest-fsfreeze-freeze": time.Minute,
		}})
		if err := a.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		freeze := goDo(func() error { return a.Execute(t.Context(), "guest-fsfreeze-freeze", nil, nil) })
		synctest.Wait()

		start := time.Now()
		err := a.Ping(t.Context())
		if !errors.Is(err, qga.ErrBusy) || errors.Is(err, qga.ErrTimeout) || time.Since(start) != 3*time.Second {
			t.Errorf("ping behind a running command = %v after %s, want ErrBusy (not ErrTimeout) after QueueTimeout 3s",
				err, time.Since(start))
		}
		if err != nil && !strings.Contains(err.Error(), `"guest-fsfreeze-freeze" has held the channel for 3s`) {
			t.Errorf("ErrBusy message %q does not name the command holding the channel", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := a.Ping(ctx); !errors.Is(err, qga.ErrBusy) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, qga.ErrTimeout) {
			t.Errorf("ping whose context ends in line = %v, want ErrBusy and context.DeadlineExceeded", err)
		}
		ctx, cancel = context.WithCancel(t.Context())
		ping := goDo(func() error { return a.Ping(ctx) })
		synctest.Wait()
		cancel()
		if err := <-ping; !errors.Is(err, context.Canceled) || errors.Is(err, qga.ErrBusy) {
			t.Errorf("ping cancelled in line = %v, want context.Canceled", err)
		}

		close(release)
		if err := <-freeze; err != nil {
			t.Fatalf("guest-fsfreeze-freeze: %v", err)
		}
		if err := a.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(names(ag.Requests()), ","); got != "guest-sync-delimited,guest-ping,guest-fsfreeze-freeze,guest-ping" {
			t.Errorf("requests = %s, want the queued pings never sent and no resync", got)
		}
	})
}

// TestSendDeadlineAfterQueueing: a request that waited in line and was then sent but not
// answered fails with ErrTimeout exactly its own deadline after it was sent; the next request
// resynchronises (0xFF + guest-sync-delimited) and the late reply is discarded.
func TestSendDeadlineAfterQueueing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag, release := slowAgent(t)
		stuck := make(chan struct{})
		ag.Handle("guest-get-osinfo", func(json.RawMessage) (any, *qgatest.Error) {
			<-stuck
			return map[string]string{"id": "late"}, nil
		})
		var sentAt atomic.Int64 // fake time the osinfo request was written
		a := connect(t, ag, qga.Options{
			CommandTimeouts: map[string]time.Duration{"guest-get-osinfo": time.Second, "guest-fsfreeze-freeze": time.Minute},
			Tap: func(r qmp.Record) {
				if r.Dir == qmp.Sent && strings.Contains(string(r.Raw), "guest-get-osinfo") {
					sentAt.Store(r.Time.UnixNano())
				}
			},
		})
		if err := a.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		freeze := goDo(func() error { return a.Execute(t.Context(), "guest-fsfreeze-freeze", nil, nil) })
		synctest.Wait()
		osinfo := goDo(func() error { _, err := a.OSInfo(t.Context()); return err })
		synctest.Wait()
		time.Sleep(2 * time.Second) // in line for twice its deadline: no effect
		close(release)
		if err := <-freeze; err != nil {
			t.Fatal(err)
		}
		err := <-osinfo
		if !errors.Is(err, qga.ErrTimeout) || errors.Is(err, qga.ErrBusy) {
			t.Fatalf("unanswered guest-get-osinfo = %v, want ErrTimeout", err)
		}
		if took := time.Since(time.Unix(0, sentAt.Load())); took != time.Second {
			t.Errorf("ErrTimeout %s after the request was sent, want its deadline, 1s", took)
		}
		close(stuck) // the agent answers the abandoned request now
		synctest.Wait()
		if err := a.Ping(t.Context()); err != nil {
			t.Fatalf("ping after a lost reply: %v", err)
		}
		reqs := ag.Requests()
		if got := strings.Join(names(reqs), ","); got != "guest-sync-delimited,guest-ping,guest-fsfreeze-freeze,guest-get-osinfo,guest-sync-delimited,guest-ping" {
			t.Errorf("requests = %s, want a resync after the lost reply", got)
		}
		if !reqs[4].Delimited {
			t.Error("resync not preceded by 0xFF")
		}
	})
}

// TestWaitLeavesChannelFree: while a guest process runs, Wait's guest-exec-status polls are
// separate requests, so pings go through between them; a wait that ends before the process is
// ErrStillRunning, not ErrTimeout, and costs no resync.
func TestWaitLeavesChannelFree(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag := fakeAgent(t, qgatest.Options{})
		exited := make(chan struct{})
		var polls, pids atomic.Int32
		ag.Handle("guest-exec", func(json.RawMessage) (any, *qgatest.Error) {
			return map[string]int{"pid": 41 + int(pids.Add(1))}, nil // 42, then 43
		})
		ag.Handle("guest-exec-status", func(args json.RawMessage) (any, *qgatest.Error) {
			polls.Add(1)
			var p struct{ PID int }
			_ = json.Unmarshal(args, &p)
			select {
			case <-exited:
				if p.PID != 42 { // pid 43 never exits
					return map[string]any{"exited": false}, nil
				}
				return map[string]any{"exited": true, "exitcode": 0, "out-data": base64.StdEncoding.EncodeToString([]byte("slept\n"))}, nil
			default:
				return map[string]any{"exited": false}, nil
			}
		})
		a := connect(t, ag, qga.Options{CommandTimeouts: map[string]time.Duration{"guest-ping": time.Second}})

		type result struct {
			st  qga.ExecStatus
			err error
		}
		run := make(chan result, 1)
		go func() {
			st, err := a.Run(t.Context(), "/bin/sleep", "10")
			run <- result{st, err}
		}()
		for range 50 { // 10 s of fake time, a ping every 200 ms
			time.Sleep(200 * time.Millisecond)
			start := time.Now()
			if err := a.Ping(t.Context()); err != nil || time.Since(start) != 0 {
				t.Fatalf("ping while the guest process runs = %v after %s, want an immediate answer", err, time.Since(start))
			}
		}
		close(exited)
		r := <-run
		if r.err != nil || !r.st.Exited || string(r.st.Stdout) != "slept\n" {
			t.Fatalf("Run = %+v, %v", r.st, r.err)
		}
		if n := polls.Load(); n < 90 {
			t.Errorf("%d guest-exec-status polls in 10 s, want ≥ 90 (every 100 ms at most)", n)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		pid, err := a.Exec(ctx, "/bin/sleep", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Wait(ctx, pid)
		if !errors.Is(err, qga.ErrStillRunning) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, qga.ErrTimeout) {
			t.Fatalf("Wait past its context = %v, want ErrStillRunning (context.DeadlineExceeded), not ErrTimeout", err)
		}
		n := len(ag.Requests())
		if err := a.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
		if last := ag.Requests()[n:]; len(last) != 1 || last[0].Name != "guest-ping" {
			t.Errorf("requests after the wait ended = %s, want the ping alone (no resync)", strings.Join(names(last), ","))
		}
	})
}

// TestWaitRetriesBusyPolls: a guest-exec-status poll that could not be sent because a slow
// command held the channel past QueueTimeout does not end the wait.
func TestWaitRetriesBusyPolls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag, release := slowAgent(t)
		var exited atomic.Bool
		ag.Handle("guest-exec-status", func(json.RawMessage) (any, *qgatest.Error) {
			return map[string]bool{"exited": exited.Load()}, nil
		})
		a := connect(t, ag, qga.Options{QueueTimeout: time.Second, CommandTimeouts: map[string]time.Duration{
			"guest-fsfreeze-freeze": time.Minute,
		}})
		wait := make(chan error, 1)
		go func() { _, err := a.Wait(t.Context(), 42); wait <- err }()
		synctest.Wait() // between polls
		freeze := goDo(func() error { return a.Execute(t.Context(), "guest-fsfreeze-freeze", nil, nil) })
		time.Sleep(5 * time.Second) // polls meanwhile: each waits 1 s in line, then ErrBusy
		exited.Store(true)
		close(release)
		if err := <-freeze; err != nil {
			t.Fatal(err)
		}
		if err := <-wait; err != nil {
			t.Fatalf("Wait with busy polls = %v, want the process's exit", err)
		}
	})
}

// TestWaitPollKeepsItsDeadline: a guest-exec-status poll sent just before Wait's context ends
// gets its full command deadline; the answer that comes after ctx's end is read (no timeout,
// no resync), and Wait then reports the process still running. Before, the poll was cut at
// ctx's end and its timeout made the agent look lost (seen in CI: `"guest-exec-status" after
// 1ms`, AGENT_NOT_CONNECTED).
func TestWaitPollKeepsItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ag := fakeAgent(t, qgatest.Options{})
		const answer = 50 * time.Millisecond
		var polls atomic.Int32
		ag.Handle("guest-exec-status", func(json.RawMessage) (any, *qgatest.Error) {
			polls.Add(1)
			time.Sleep(answer) // the guest answers, slowly
			return map[string]bool{"exited": false}, nil
		})
		a := connect(t, ag, qga.Options{})
		ctx, cancel := context.WithTimeout(t.Context(), 120*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := a.Wait(ctx, 42)
		took := time.Since(start)
		if !errors.Is(err, qga.ErrStillRunning) || errors.Is(err, qga.ErrTimeout) {
			t.Fatalf("Wait = %v, want ErrStillRunning and no timeout", err)
		}
		// The third poll went out with ~14 ms of ctx left and was answered 50 ms after it.
		if took < 150*time.Millisecond || polls.Load() != 3 {
			t.Errorf("Wait returned after %s and %d polls: the last poll was cut short", took, polls.Load())
		}
		if err := a.Ping(t.Context()); err != nil {
			t.Errorf("ping after the wait: %v", err)
		}
	})
}
