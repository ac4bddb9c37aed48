package qmp_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// result runs fn in a goroutine and returns a channel with its error.
func result(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

// within fails the test if ch yields nothing within d (a guard against hangs, not a timing
// assertion).
func within(t *testing.T, ch <-chan error, d time.Duration, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(d):
		t.Fatalf("%s did not return within %s", what, d)
		return nil
	}
}

func TestDisconnectMidCommand(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("hang").NoReply()
	srv.On("crash").CloseConn()
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, time.Minute)

	// Several commands waiting for replies that will never come...
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 4 {
		wg.Go(func() { errs <- m.Execute(ctx, "hang", nil, nil) })
	}
	if _, err := srv.WaitCommands(ctx, "hang", 4); err != nil {
		t.Fatal(err)
	}
	// ...then QEMU dies while handling another.
	wg.Go(func() { errs <- m.Execute(ctx, "crash", nil, nil) })
	done := make(chan error, 1)
	go func() { wg.Wait(); close(errs); done <- nil }()
	_ = within(t, done, 10*time.Second, "pending Execute calls after disconnect")
	for err := range errs {
		if !errors.Is(err, qmp.ErrDisconnected) {
			t.Errorf("pending Execute = %v, want ErrDisconnected", err)
		}
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done not closed after the peer closed the connection")
	}
	if err := m.Err(); !errors.Is(err, qmp.ErrDisconnected) || errors.Is(err, qmp.ErrClosed) {
		t.Errorf("Err() = %v, want ErrDisconnected (not ErrClosed)", err)
	}
	if err := m.Execute(ctx, "hang", nil, nil); !errors.Is(err, qmp.ErrDisconnected) {
		t.Errorf("Execute after disconnect = %v, want ErrDisconnected", err)
	}
}

func TestCloseFailsPendingAndIsIdempotent(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("hang").NoReply()
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, time.Minute)

	pending := result(func() error { return m.Execute(ctx, "hang", nil, nil) })
	if _, err := srv.WaitCommand(ctx, "hang"); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	err := within(t, pending, 10*time.Second, "Execute pending at Close")
	if !errors.Is(err, qmp.ErrDisconnected) || !errors.Is(err, qmp.ErrClosed) {
		t.Errorf("pending Execute after Close = %v, want ErrDisconnected and ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if !errors.Is(m.Err(), qmp.ErrClosed) {
		t.Errorf("Err() after Close = %v, want ErrClosed", m.Err())
	}
}

func TestContextDeadlineAndLateReplyDiscarded(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	release := make(chan struct{})
	srv.On("slow").After(release).Return("stale").Times(1)
	srv.On("slow").Return("fresh")
	lateReply := make(chan struct{})
	var once sync.Once
	m := connect(t, srv, qmp.Options{Tap: func(r qmp.Record) {
		if r.Dir == qmp.Received && r.Kind == qmp.KindReply && bytes.Contains(r.Raw, []byte(`"stale"`)) {
			once.Do(func() { close(lateReply) })
		}
	}})

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := m.Execute(ctx, "slow", nil, nil)
	if !errors.Is(err, qmp.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute past ctx deadline = %v, want ErrTimeout and DeadlineExceeded", err)
	}
	// Let the stale reply arrive; it must be dropped, not handed to the next command.
	close(release)
	select {
	case <-lateReply:
	case <-ctxT(t, 10*time.Second).Done():
		t.Fatal("late reply never arrived")
	}
	var got string
	if err := m.Execute(ctxT(t, 5*time.Second), "slow", nil, &got); err != nil || got != "fresh" {
		t.Fatalf("next command = %q, %v; want fresh", got, err)
	}
}

func TestPerCommandTimeoutOverride(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("migrate-incoming").NoReply()
	srv.On("query-status").NoReply()
	m := connect(t, srv, qmp.Options{
		DefaultTimeout:  50 * time.Millisecond,
		CommandTimeouts: map[string]time.Duration{"migrate-incoming": 24 * time.Hour},
	})

	// No ctx deadline: the 50ms default applies.
	err := within(t, result(func() error {
		return m.Execute(context.Background(), "query-status", nil, nil)
	}), 10*time.Second, "query-status with a 50ms default timeout")
	if !errors.Is(err, qmp.ErrTimeout) {
		t.Fatalf("query-status = %v, want ErrTimeout", err)
	}
	// The override lifts migrate-incoming above the default: it is still waiting when a
	// sooner ctx deadline (which always wins) ends it.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = m.Execute(ctx, "migrate-incoming", nil, nil)
	if !errors.Is(err, qmp.ErrTimeout) {
		t.Fatalf("migrate-incoming = %v, want ErrTimeout", err)
	}
	if ctx.Err() == nil {
		t.Errorf("migrate-incoming gave up before its ctx deadline: the 50ms default applied, not its override")
	}
}

func TestContextCanceled(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	srv.On("hang").NoReply()
	m := connect(t, srv, qmp.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	pending := result(func() error { return m.Execute(ctx, "hang", nil, nil) })
	if _, err := srv.WaitCommand(ctxT(t, 5*time.Second), "hang"); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := within(t, pending, 10*time.Second, "Execute after cancel")
	if !errors.Is(err, context.Canceled) || errors.Is(err, qmp.ErrTimeout) {
		t.Fatalf("Execute after cancel = %v, want context.Canceled, not ErrTimeout", err)
	}
	if m.Err() != nil {
		t.Errorf("connection lost after a cancelled command: %v", m.Err())
	}
}
