package launcher

import (
	"errors"
	"testing"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// TestClaims: an event is claimed only when it arrives while a command that causes it runs,
// and only once; other names, and events before or after the command, are the domain's to
// read back.
func TestClaims(t *testing.T) {
	var c claims
	ev := func(name string, seq uint64) qmp.Event { return qmp.Event{Name: name, Seq: seq} }

	if !c.note(ev("STOP", 1)) {
		t.Fatal("note filtered an event out: the domain must see every event")
	}
	boom := errors.New("boom")
	err := c.during("STOP", func() error {
		c.note(ev("STOP", 2))
		c.note(ev("RESUME", 3)) // not what a stop causes
		c.note(ev("STOP", 4))   // a second one in the same window (another client's): claimed too
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("during returned %v, want the command's error", err)
	}
	c.note(ev("STOP", 5))
	for _, tc := range []struct {
		seq  uint64
		want bool
	}{{1, false}, {2, true}, {2, false}, {3, false}, {4, true}, {5, false}} {
		if got := c.take(tc.seq); got != tc.want {
			t.Errorf("take(%d) = %v, want %v", tc.seq, got, tc.want)
		}
	}
	// Nested windows of two commands: the event is claimed until both ended.
	_ = c.during("RESUME", func() error {
		return c.during("RESUME", func() error { return nil })
	})
	c.note(ev("RESUME", 6))
	if c.take(6) {
		t.Error("an event after both commands ended was claimed")
	}
}
