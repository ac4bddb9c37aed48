package launcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// guestSpec is the test guest as a launcher domain spec.
func guestSpec(t testing.TB, name string, cmdline ...string) *pb.DomainSpec {
	files := testguest.Assets(t)
	prereq.QEMU(t)
	return &pb.DomainSpec{
		Name:         name,
		Accel:        "tcg",
		MemoryMib:    256,
		Boot:         &pb.Boot{Kernel: files.Kernel, Initrd: files.Initrd, Cmdline: strings.Join(append([]string{testguest.BaseCmdline}, cmdline...), " ")},
		Serial:       true,
		Agent:        true,
		HotplugPorts: 2,
		// As translation adds it by default, with guest statistics every 2 s instead of 10
		// so that tests see the first report soon.
		Balloon: &pb.Balloon{StatsPeriodSeconds: 2, FreePageReporting: true},
	}
}

// recorder collects a launcher's events from WatchEvents and lets tests wait for one.
type recorder struct {
	mu     sync.Mutex
	events []*pb.Event
	notify chan struct{}
	done   chan struct{}
	err    error
}

func watch(t testing.TB, c *launcher.Client, after uint64) *recorder {
	r := &recorder{notify: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(r.done)
		err := c.WatchEvents(ctx, after, func(e *pb.Event) error {
			r.mu.Lock()
			r.events = append(r.events, e)
			close(r.notify)
			r.notify = make(chan struct{})
			r.mu.Unlock()
			return nil
		})
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// waitEvent waits for the first event at index ≥ from that match accepts and returns its index.
func (r *recorder) waitEvent(ctx context.Context, from int, what string, match func(*pb.Event) bool) (int, error) {
	for {
		r.mu.Lock()
		for i := from; i < len(r.events); i++ {
			if match(r.events[i]) {
				r.mu.Unlock()
				return i, nil
			}
		}
		from = max(from, len(r.events))
		notify := r.notify
		r.mu.Unlock()
		select {
		case <-notify:
		case <-r.done:
			if r.err == nil { // the launcher is exiting; %w would print %!w(<nil>)
				return -1, fmt.Errorf("wait for event %s: stream ended (<nil>); events: %s", what, r.dump())
			}
			return -1, fmt.Errorf("wait for event %s: stream ended (%w); events: %s", what, r.err, r.dump())
		case <-ctx.Done():
			return -1, fmt.Errorf("wait for event %s: %w; events: %s", what, ctx.Err(), r.dump())
		}
	}
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func (r *recorder) snapshot() []*pb.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.Event(nil), r.events...)
}

func (r *recorder) dump() string {
	var b strings.Builder
	for _, e := range r.snapshot() {
		fmt.Fprintf(&b, "\n  %d %s", e.GetSeq(), describe(e))
	}
	return b.String()
}

func describe(e *pb.Event) string {
	switch k := e.GetKind().(type) {
	case *pb.Event_Lifecycle:
		return fmt.Sprintf("lifecycle %s reason=%q qemu=%q", k.Lifecycle.GetState(), k.Lifecycle.GetReason(), k.Lifecycle.GetQemuEvent())
	case *pb.Event_Device:
		return fmt.Sprintf("device %s %s %s", k.Device.GetKind(), k.Device.GetAction(), k.Device.GetId())
	case *pb.Event_Migration:
		return fmt.Sprintf("migration %s %s", k.Migration.GetRole(), k.Migration.GetStatus())
	case *pb.Event_Agent:
		return fmt.Sprintf("agent connected=%v", k.Agent.GetConnected())
	}
	return "?"
}

func isState(s pb.State) func(*pb.Event) bool {
	return func(e *pb.Event) bool { return e.GetLifecycle() != nil && e.GetLifecycle().GetState() == s }
}

// isAgent matches the agent connecting (up) or going away; not guest info changes.
func isAgent(up bool) func(*pb.Event) bool {
	return func(e *pb.Event) bool {
		return e.GetAgent() != nil && !e.GetAgent().GetGuestInfoChanged() && e.GetAgent().GetConnected() == up
	}
}

func isGuestInfoChanged(e *pb.Event) bool { return e.GetAgent().GetGuestInfoChanged() }

func isDevice(action pb.DeviceEvent_Action, id string) func(*pb.Event) bool {
	return func(e *pb.Event) bool {
		return e.GetDevice() != nil && e.GetDevice().GetAction() == action && e.GetDevice().GetId() == id
	}
}

func isMigration(status string) func(*pb.Event) bool {
	return func(e *pb.Event) bool { return e.GetMigration() != nil && e.GetMigration().GetStatus() == status }
}
