package launcher

import (
	"sync"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// claims tells the events a command of the launcher's own caused from the others, so that
// the domain's state is read back (query-status) only for the others. A stop makes QEMU emit
// STOP before its reply, and the reply to a successful stop already says the state (paused:
// commanded records it); reading it again would send a query-status that the reply to Pause
// (and the next command) queues behind. That round trip was most of what pause + resume
// through the launcher cost over raw QMP (BenchmarkPauseRTT).
//
// The monitor's reader runs the event subscription's filter (note) for each event before it
// reads the next line, so an event noted while a command is in flight arrived before the
// command's reply: it is the command's (or one it made redundant, e.g. a stop from
// qmp-debug.sock just before ours: the state is paused either way).
type claims struct {
	mu      sync.Mutex
	open    map[string]int      // event name → commands in flight that cause it
	claimed map[uint64]struct{} // Seq of the events those commands caused, not yet handled
}

// during runs cmd (a stop or a cont) and claims the events named event that arrive meanwhile.
func (c *claims) during(event string, cmd func() error) error {
	c.mu.Lock()
	if c.open == nil {
		c.open = map[string]int{}
	}
	c.open[event]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.open[event]--
		c.mu.Unlock()
	}()
	return cmd()
}

// note is the domain's event subscription filter (it runs on the monitor's reader): it claims
// an event a command in flight causes, and lets every event through.
func (c *claims) note(e qmp.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[e.Name] > 0 {
		if c.claimed == nil {
			c.claimed = map[uint64]struct{}{}
		}
		c.claimed[e.Seq] = struct{}{}
	}
	return true
}

// take reports whether the event with seq was claimed by a command, forgetting it.
func (c *claims) take(seq uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.claimed[seq]
	delete(c.claimed, seq)
	return ok
}
