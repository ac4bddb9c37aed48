package backoff_test

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/vmlet/vmlet/controllers/backoff"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// step is one thing that happens to key "a" at offset at from t0, and what is expected then.
type step struct {
	at      time.Duration
	fail    bool          // record a failure (else only look)
	reset   bool          // forget the key
	delay   time.Duration // the wait a failure starts
	waiting bool          // Waiting's answer after the step
	next    time.Duration // the end of the wait (offset from t0) while waiting
}

// TestBackoff follows the kubelet's image pull back-off: 10 s, doubling, capped at 5 min, a
// wait that ends exactly at last failure + delay, expiry after 2×max without failures, reset.
func TestBackoff(t *testing.T) {
	s := time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{"unknown key does not wait", []step{{at: 0}}},
		{"first failure waits initial", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 9*s + 999*time.Millisecond, waiting: true, next: 10 * s},
			{at: 10 * s},
		}},
		{"doubles per failure up to the cap", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 10 * s, fail: true, delay: 20 * s, waiting: true, next: 30 * s},
			{at: 30 * s, fail: true, delay: 40 * s, waiting: true, next: 70 * s},
			{at: 70 * s, fail: true, delay: 80 * s, waiting: true, next: 150 * s},
			{at: 150 * s, fail: true, delay: 160 * s, waiting: true, next: 310 * s},
			{at: 310 * s, fail: true, delay: 300 * s, waiting: true, next: 610 * s},
			{at: 610 * s, fail: true, delay: 300 * s, waiting: true, next: 910 * s},
		}},
		{"a failure while waiting still doubles", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 1 * s, fail: true, delay: 20 * s, waiting: true, next: 21 * s},
		}},
		{"expired after 2×max: starts over", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 10 * s, fail: true, delay: 20 * s, waiting: true, next: 30 * s},
			{at: 10*s + 10*time.Minute + s, fail: true, delay: 10 * s, waiting: true, next: 10*s + 10*time.Minute + 11*s},
		}},
		{"not yet expired at exactly 2×max", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 10 * time.Minute, fail: true, delay: 20 * s, waiting: true, next: 10*time.Minute + 20*s},
		}},
		{"reset starts over", []step{
			{at: 0, fail: true, delay: 10 * s, waiting: true, next: 10 * s},
			{at: 10 * s, fail: true, delay: 20 * s, waiting: true, next: 30 * s},
			{at: 11 * s, reset: true},
			{at: 12 * s, fail: true, delay: 10 * s, waiting: true, next: 22 * s},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(t0)
			b := backoff.New[string](0, 0, clk)
			for i, st := range tt.steps {
				clk.SetTime(t0.Add(st.at))
				switch {
				case st.fail:
					e := b.Failed("a", "cause")
					if e.Delay != st.delay || !e.Next.Equal(t0.Add(st.at+st.delay)) || e.Cause != "cause" {
						t.Fatalf("step %d: Failed = %+v, want delay %s", i, e, st.delay)
					}
				case st.reset:
					b.Reset("a")
				}
				e, waiting := b.Waiting("a")
				if waiting != st.waiting {
					t.Fatalf("step %d (t0+%s): waiting = %v, want %v", i, st.at, waiting, st.waiting)
				}
				if waiting && (!e.Next.Equal(t0.Add(st.next)) || e.Cause != "cause") {
					t.Fatalf("step %d: Waiting = %+v, want next t0+%s", i, e, st.next)
				}
			}
		})
	}
}

// TestBackoffOptions: zero options are the kubelet's; a max below initial is raised to it.
func TestBackoffOptions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	if e := backoff.New[int](0, 0, clk).Failed(1, ""); e.Delay != backoff.DefaultInitial {
		t.Errorf("default initial: %s", e.Delay)
	}
	b := backoff.New[int](time.Second, 2*time.Second, clk)
	var got []time.Duration
	for range 4 {
		got = append(got, b.Failed(1, "").Delay)
	}
	if want := []time.Duration{time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}; !equal(got, want) {
		t.Errorf("1s..2s delays %v, want %v", got, want)
	}
	if e := backoff.New[int](3*time.Second, time.Second, clk).Failed(1, ""); e.Delay != 3*time.Second {
		t.Errorf("max below initial: first delay %s", e.Delay)
	}
}

// TestBackoffForget: DeleteFunc forgets one object's keys only; GC removes expired entries, and
// so does every Failed, so entries of objects never forgotten do not pile up.
func TestBackoffForget(t *testing.T) {
	type key struct{ uid, image string }
	clk := clocktesting.NewFakePassiveClock(t0)
	b := backoff.New[key](time.Second, time.Minute, clk)
	b.Failed(key{"u1", "a"}, "")
	b.Failed(key{"u1", "b"}, "")
	b.Failed(key{"u2", "a"}, "")
	if n := b.DeleteFunc(func(k key) bool { return k.uid == "u1" }); n != 2 || b.Len() != 1 {
		t.Fatalf("DeleteFunc removed %d, %d left; want 2, 1", n, b.Len())
	}
	if _, ok := b.Waiting(key{"u2", "a"}); !ok {
		t.Error("the other object's entry was lost")
	}
	if b.Failing(key{"u1", "a"}) || !b.Failing(key{"u2", "a"}) {
		t.Error("Failing: want false for a forgotten key, true for a failed one")
	}
	clk.SetTime(t0.Add(1500 * time.Millisecond)) // its 1 s wait is over: a try now is a retry
	if !b.Failing(key{"u2", "a"}) {
		t.Error("Failing: false once the wait is over, want true until forgotten or expired")
	}
	clk.SetTime(t0.Add(2*time.Minute + time.Second))
	b.Failed(key{"u3", "a"}, "")
	if b.Len() != 1 {
		t.Errorf("Failed kept an expired entry: %d entries", b.Len())
	}
	clk.SetTime(clk.Now().Add(3 * time.Minute))
	b.GC()
	if b.Len() != 0 {
		t.Errorf("GC kept %d expired entries", b.Len())
	}
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
