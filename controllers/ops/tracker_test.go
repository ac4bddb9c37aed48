package ops

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// wakes collects the keys a tracker wakes.
type wakes chan string

func (w wakes) wake(k string) { w <- k }

func (w wakes) next(t *testing.T) string {
	t.Helper()
	select {
	case k := <-w:
		return k
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up within 10 s")
		return ""
	}
}

func (w wakes) none(t *testing.T) {
	t.Helper()
	select {
	case k := <-w:
		t.Fatalf("unexpected wake-up of %q", k)
	default:
	}
}

func TestEnsureRunsOnceAndWakes(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, int](0, w.wake)
	defer tr.Stop()
	release := make(chan struct{})
	var runs atomic.Int32
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 42, nil
	}
	if o := tr.Ensure("a", "v1", fn); o.State != Running {
		t.Fatalf("first Ensure: %+v, want Running", o)
	}
	if o := tr.Ensure("a", "v1", fn); o.State != Running {
		t.Fatalf("second Ensure while running: %+v, want Running", o)
	}
	if n := tr.Running(); n != 1 {
		t.Fatalf("Running() = %d, want 1", n)
	}
	close(release)
	if k := w.next(t); k != "a" {
		t.Fatalf("woke %q, want a", k)
	}
	o := tr.Ensure("a", "v1", fn)
	if o.State != Done || o.Value != 42 || o.Err != nil || o.Ended.Before(o.Started) {
		t.Fatalf("after the end: %+v, want Done 42", o)
	}
	if r := runs.Load(); r != 1 {
		t.Fatalf("fn ran %d times, want 1", r)
	}
	w.none(t)
}

func TestAnotherIdentityCancelsAndRestarts(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, string](0, w.wake)
	defer tr.Stop()
	cancelled := make(chan struct{})
	tr.Ensure("a", "v1", func(ctx context.Context) (string, error) {
		<-ctx.Done()
		close(cancelled)
		return "old", ctx.Err()
	})
	tr.Ensure("a", "v2", func(context.Context) (string, error) { return "new", nil })
	<-cancelled
	if k := w.next(t); k != "a" {
		t.Fatalf("woke %q", k)
	}
	if o := tr.Ensure("a", "v2", nil); o.State != Done || o.Value != "new" {
		t.Fatalf("got %+v, want the new identity's outcome", o)
	}
	w.none(t) // the cancelled operation's end wakes nobody
}

func TestFailureStaysUntilForget(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, int](0, w.wake)
	defer tr.Stop()
	boom := errors.New("boom")
	var runs atomic.Int32
	fn := func(context.Context) (int, error) { runs.Add(1); return 0, boom }
	tr.Ensure("a", "v1", fn)
	w.next(t)
	if o := tr.Ensure("a", "v1", fn); o.State != Done || !errors.Is(o.Err, boom) {
		t.Fatalf("got %+v, want Done with boom", o)
	}
	tr.Forget("a")
	if o := tr.Ensure("a", "v1", fn); o.State != Running {
		t.Fatalf("after Forget: %+v, want a new Running operation", o)
	}
	w.next(t)
	if r := runs.Load(); r != 2 {
		t.Fatalf("fn ran %d times, want 2", r)
	}
}

func TestTimeoutBoundsAnOperation(t *testing.T) {
	w := make(wakes, 1)
	tr := New[string, int](20*time.Millisecond, w.wake)
	defer tr.Stop()
	tr.Ensure("a", "v1", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	})
	w.next(t)
	if o := tr.Ensure("a", "v1", nil); !errors.Is(o.Err, context.DeadlineExceeded) {
		t.Fatalf("got %+v, want DeadlineExceeded", o)
	}
}

func TestStopCancelsWaitsAndWakesNobody(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, int](0, w.wake)
	var ended atomic.Bool
	tr.Ensure("a", "v1", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		ended.Store(true)
		return 0, ctx.Err()
	})
	tr.Stop()
	if !ended.Load() {
		t.Fatal("Stop returned before the operation did")
	}
	w.none(t)
	if o := tr.Ensure("b", "v1", func(context.Context) (int, error) { t.Error("started after Stop"); return 0, nil }); o.State != Running {
		t.Fatalf("after Stop: %+v", o)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, int](0, w.wake)
	defer tr.Stop()
	block := make(chan struct{})
	defer close(block)
	tr.Ensure("slow", "v1", func(context.Context) (int, error) { <-block; return 0, nil })
	tr.Ensure("fast", "v1", func(context.Context) (int, error) { return 1, nil })
	if k := w.next(t); k != "fast" {
		t.Fatalf("woke %q, want fast (slow still runs)", k)
	}
	if o := tr.Ensure("fast", "v1", nil); o.State != Done || o.Value != 1 {
		t.Fatalf("fast: %+v", o)
	}
}

func TestForgetWaitsForTheOperation(t *testing.T) {
	tr := New[string, int](0, nil)
	defer tr.Stop()
	cancelled, release := make(chan struct{}), make(chan struct{})
	tr.Ensure("a", "v1", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		close(cancelled)
		<-release // still cleaning up after the cancel
		return 0, ctx.Err()
	})
	forgotten := make(chan struct{})
	go func() { tr.Forget("a"); close(forgotten) }()
	<-cancelled
	select {
	case <-forgotten:
		t.Fatal("Forget returned before the operation did")
	default: // the operation cannot return before release: Forget must still wait
	}
	close(release)
	<-forgotten
	if n := tr.Running(); n != 0 {
		t.Fatalf("Running() = %d after Forget", n)
	}
}

func TestForgetFunc(t *testing.T) {
	tr := New[string, int](0, nil)
	defer tr.Stop()
	block := func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }
	for _, k := range []string{"vm1/a", "vm1/b", "vm2/a"} {
		tr.Ensure(k, "v1", block)
	}
	tr.ForgetFunc(func(k string) bool { return strings.HasPrefix(k, "vm1/") })
	if n := tr.Running(); n != 1 {
		t.Fatalf("Running() = %d after forgetting vm1's, want 1 (vm2's)", n)
	}
}

// TestTake: an ended operation's outcome is handed over once and forgotten (the next Ensure
// of the same identity runs again); a running one, or none, is not taken.
func TestTake(t *testing.T) {
	w := make(wakes, 4)
	tr := New[string, int](0, w.wake)
	defer tr.Stop()
	if _, ok := tr.Take("a"); ok {
		t.Fatal("Take of a key with no operation: ok")
	}
	release := make(chan struct{})
	var runs atomic.Int32
	fn := func(context.Context) (int, error) {
		runs.Add(1)
		<-release
		return 7, nil
	}
	tr.Ensure("a", "v1", fn)
	if _, ok := tr.Take("a"); ok {
		t.Fatal("Take of a running operation: ok")
	}
	close(release)
	w.next(t)
	o, ok := tr.Take("a")
	if !ok || o.State != Done || o.Value != 7 || o.Err != nil {
		t.Fatalf("Take after the end: %+v %v, want Done 7", o, ok)
	}
	if _, ok := tr.Take("a"); ok {
		t.Fatal("second Take: ok, want the outcome forgotten")
	}
	if o := tr.Ensure("a", "v1", fn); o.State != Running {
		t.Fatalf("Ensure after Take: %+v, want a new run", o)
	}
	w.next(t)
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}
