package qmp_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

func TestEventsDoNotBlockReplies(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	release := make(chan struct{})
	srv.On("slow").After(release).Return("done")
	m := connect(t, srv, qmp.Options{})
	ctx := ctxT(t, 30*time.Second)

	// A subscriber that reads nothing while thousands of events arrive.
	events, cancel := m.Subscribe(nil)
	defer cancel()
	pending := result(func() error {
		var s string
		if err := m.Execute(ctx, "slow", nil, &s); err != nil {
			return err
		}
		if s != "done" {
			return fmt.Errorf("slow = %q", s)
		}
		return nil
	})
	if _, err := srv.WaitCommand(ctx, "slow"); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	for i := range n {
		if err := srv.Emit("TICK", map[string]int{"n": i}); err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
	}
	close(release)
	if err := within(t, pending, 10*time.Second, "Execute with an undrained subscriber"); err != nil {
		t.Fatal(err)
	}
	// Nothing was dropped, and order is kept.
	for i := range n {
		e := <-events
		var d struct{ N int }
		if err := json.Unmarshal(e.Data, &d); err != nil || e.Name != "TICK" || d.N != i {
			t.Fatalf("event %d = %s %s (%v)", i, e.Name, e.Data, err)
		}
		if e.Timestamp.IsZero() {
			t.Fatalf("event %d has no timestamp", i)
		}
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has Seq %d, want %d (its place on the connection)", i, e.Seq, i+1)
		}
	}
}

func TestSubscribeFilterAndCancel(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	m := connect(t, srv, qmp.Options{})
	stops, cancelStops := m.Subscribe(qmp.EventNamed("STOP"))
	all, cancelAll := m.Subscribe(nil)
	defer cancelAll()

	for _, name := range []string{"RESUME", "STOP", "RESUME", "STOP"} {
		if err := srv.Emit(name, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if e := <-stops; e.Name != "STOP" || e.Data != nil {
			t.Fatalf("filtered event %d = %+v, want STOP without data", i, e)
		}
	}
	for i, want := range []string{"RESUME", "STOP", "RESUME", "STOP"} {
		if e := <-all; e.Name != want {
			t.Fatalf("event %d = %s, want %s", i, e.Name, want)
		}
	}
	cancelStops()
	cancelStops() // idempotent
	if _, ok := <-stops; ok {
		t.Fatal("channel still open after cancel")
	}
}

func TestExecuteAndWaitSeesEventBeforeReply(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	// QEMU emits STOP before it answers "stop": a wait started after Execute returned would
	// miss it.
	srv.On("stop").Emit("STOP", nil)
	m := connect(t, srv, qmp.Options{})

	e, err := m.ExecuteAndWait(ctxT(t, 5*time.Second), "stop", nil, nil, qmp.EventNamed("STOP"))
	if err != nil || e.Name != "STOP" {
		t.Fatalf("ExecuteAndWait = %+v, %v; want STOP", e, err)
	}

	w := m.Expect(qmp.EventNamed("STOP"))
	defer w.Cancel()
	if err := m.Execute(ctxT(t, 5*time.Second), "stop", nil, nil); err != nil {
		t.Fatal(err)
	}
	if e, err := w.Wait(ctxT(t, 5*time.Second)); err != nil || e.Name != "STOP" {
		t.Fatalf("Expect/Wait = %+v, %v; want STOP", e, err)
	}
}

func TestWaitEventTimeoutAndDisconnect(t *testing.T) {
	srv := fake(t, qmptest.Options{})
	m := connect(t, srv, qmp.Options{})

	_, err := m.WaitEvent(ctxT(t, 50*time.Millisecond), qmp.EventNamed("NEVER"))
	if !errors.Is(err, qmp.ErrTimeout) {
		t.Fatalf("WaitEvent past deadline = %v, want ErrTimeout", err)
	}

	// Events read before the connection dropped are still delivered, then the channel closes.
	events, cancel := m.Subscribe(nil)
	defer cancel()
	w := m.Expect(qmp.EventNamed("NEVER"))
	defer w.Cancel()
	if err := srv.Emit("SHUTDOWN", map[string]any{"guest": true}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Send([]byte(`{"event": "LAST", "timestamp": {"seconds": 1, "microseconds": 2}}`)); err != nil {
		t.Fatal(err)
	}
	if err := srv.CloseConn(); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	if e := <-events; e.Name != "SHUTDOWN" || string(e.Data) != `{"guest":true}` {
		t.Fatalf("first event after disconnect = %+v", e)
	}
	if e := <-events; e.Name != "LAST" || !e.Timestamp.Equal(time.Unix(1, 2000)) {
		t.Fatalf("second event after disconnect = %+v", e)
	}
	if _, ok := <-events; ok {
		t.Fatal("events channel not closed after disconnect")
	}
	if _, err := w.Wait(ctxT(t, 5*time.Second)); !errors.Is(err, qmp.ErrDisconnected) {
		t.Fatalf("Wait after disconnect = %v, want ErrDisconnected", err)
	}
	late, cancelLate := m.Subscribe(nil)
	defer cancelLate()
	if _, ok := <-late; ok {
		t.Fatal("Subscribe after disconnect returned an open channel")
	}
}
