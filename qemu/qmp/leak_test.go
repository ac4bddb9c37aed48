package qmp_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
	"github.com/vmlet/vmlet/qemu/qmp/qmptest"
)

// TestNoGoroutineLeak: after Close, cancel and the fake's Close, no goroutine of the client
// (reader, subscription pumps) or of the fake is left. Close and cancel wait for their goroutines,
// so this holds the moment they return.
func TestNoGoroutineLeak(t *testing.T) {
	func() {
		srv := qmptest.NewServer(qmptest.Options{})
		defer srv.Close()
		srv.On("stop").Emit("STOP", nil)
		srv.On("hang").NoReply()
		m, err := qmp.New(ctxT(t, 5*time.Second), srv.Pipe(), qmp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, cancelAll := m.Subscribe(nil) // never read: its queue holds the STOP event
		defer cancelAll()
		if _, err := m.ExecuteAndWait(ctxT(t, 5*time.Second), "stop", nil, nil, qmp.EventNamed("STOP")); err != nil {
			t.Fatal(err)
		}
		pending := result(func() error { return m.Execute(ctxT(t, time.Minute), "hang", nil, nil) })
		if _, err := srv.WaitCommand(ctxT(t, 5*time.Second), "hang"); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-pending; !errors.Is(err, qmp.ErrClosed) {
			t.Errorf("pending Execute after Close = %v, want ErrClosed", err)
		}
	}()
	// A goroutine that has signalled its end may still be returning: wait (yielding, with a
	// deadline) until none of ours is left.
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := ourGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left behind:\n%s", strings.Join(left, "\n\n"))
		}
		runtime.Gosched()
	}
}

// ourGoroutines returns the stacks of live goroutines running code of qmp or qmptest.
func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	var left []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "vmlet/qemu/qmp.(*") || strings.Contains(g, "vmlet/qemu/qmp/qmptest.") {
			left = append(left, g)
		}
	}
	return left
}
