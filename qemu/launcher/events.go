package launcher

import (
	"fmt"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// eventRetention is how many events the launcher keeps for WatchEvents replay.
const eventRetention = 1024

// eventLog numbers the domain's events (1, 2, 3, ... no gaps) and keeps the newest
// eventRetention for WatchEvents.
type eventLog struct {
	f   *feed[*pb.Event]
	now func() time.Time
}

func newEventLog() *eventLog {
	return &eventLog{f: newFeed[*pb.Event](eventRetention), now: time.Now}
}

// emit appends an event whose kind set fills in; events after close are dropped (nil).
func (l *eventLog) emit(set func(*pb.Event)) *pb.Event {
	ev, _ := l.f.add(func(seq uint64) *pb.Event {
		e := &pb.Event{Seq: seq, TimeUnixNano: l.now().UnixNano()}
		set(e)
		return e
	})
	return ev
}

func (l *eventLog) lifecycle(state pb.State, reason, qemuEvent string) *pb.Event {
	return l.lifecycleMsg(state, reason, qemuEvent, "")
}

func (l *eventLog) lifecycleMsg(state pb.State, reason, qemuEvent, msg string) *pb.Event {
	return l.emit(func(e *pb.Event) {
		e.Kind = &pb.Event_Lifecycle{Lifecycle: &pb.LifecycleEvent{State: state, Reason: reason, QemuEvent: qemuEvent, Message: msg}}
	})
}

func (l *eventLog) device(kind pb.DeviceEvent_Kind, action pb.DeviceEvent_Action, id string) *pb.Event {
	return l.emit(func(e *pb.Event) {
		e.Kind = &pb.Event_Device{Device: &pb.DeviceEvent{Kind: kind, Action: action, Id: id}}
	})
}

func (l *eventLog) migration(role, status string) *pb.Event {
	return l.emit(func(e *pb.Event) {
		e.Kind = &pb.Event_Migration{Migration: &pb.MigrationEvent{Role: role, Status: status}}
	})
}

func (l *eventLog) agent(connected bool) *pb.Event {
	return l.emit(func(e *pb.Event) { e.Kind = &pb.Event_Agent{Agent: &pb.AgentEvent{Connected: connected}} })
}

func (l *eventLog) lease(lease *pb.Lease) *pb.Event {
	return l.emit(func(e *pb.Event) { e.Kind = &pb.Event_Lease{Lease: &pb.LeaseEvent{Lease: lease}} })
}

// resource: "cpu" or "memory" changed (read Domain.cpu / Domain.memory).
func (l *eventLog) resource(kind string) *pb.Event {
	return l.emit(func(e *pb.Event) { e.Kind = &pb.Event_Resource{Resource: &pb.ResourceEvent{Kind: kind}} })
}

func (l *eventLog) last() uint64 { return l.f.last() }

func (l *eventLog) close() { l.f.close() }

// since is the replay window after `after`; ErrEventsLost when some of it is gone, and
// ErrInvalidRequest for a number that was never issued.
func (l *eventLog) since(after uint64) (window[*pb.Event], error) {
	w := l.f.since(after, 0)
	switch {
	case after > w.next:
		return w, fmt.Errorf("watch events after %d: %w: the newest is %d", after, ErrInvalidRequest, w.next)
	case w.lost > 0:
		return w, fmt.Errorf("watch events after %d: %w: %d dropped", after, ErrEventsLost, w.lost)
	}
	return w, nil
}
