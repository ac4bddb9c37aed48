package qmp

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// EventNamed returns a filter matching events called name (e.g. "STOP").
func EventNamed(name string) func(Event) bool {
	return func(e Event) bool { return e.Name == name }
}

// Subscribe delivers every event for which filter returns true (all events if filter is nil),
// in order, from now on. Each subscriber has its own unbounded queue: a slow reader never
// blocks command replies or other subscribers, and nothing is dropped. When the connection is
// gone, the events already read are still delivered, then the channel is closed. Always call
// cancel (it is idempotent): it returns once the subscription's goroutine has exited, the
// channel is closed and undelivered events are dropped. filter runs on the reader goroutine: keep it fast and never call the Monitor from it.
func (m *Monitor) Subscribe(filter func(Event) bool) (events <-chan Event, cancel func()) {
	s := &subscriber{
		filter: filter,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		out:    make(chan Event),
		exited: make(chan struct{}),
	}
	m.mu.Lock()
	if m.subs == nil {
		s.finished = true // connection already gone: the channel closes at once
	} else {
		m.subs[s] = struct{}{}
	}
	m.mu.Unlock()
	go s.pump()
	cancel = sync.OnceFunc(func() {
		m.mu.Lock()
		delete(m.subs, s) // no-op on a nil map
		m.mu.Unlock()
		close(s.stop)
		<-s.exited // prompt: every blocking point of pump also selects on stop
	})
	return s.out, cancel
}

// publish queues e for every matching subscriber. Called by the reader only.
func (m *Monitor) publish(e Event) {
	m.mu.Lock()
	subs := make([]*subscriber, 0, len(m.subs))
	for s := range m.subs {
		subs = append(subs, s)
	}
	m.mu.Unlock()
	for _, s := range subs {
		if s.filter == nil || s.filter(e) {
			s.push(e)
		}
	}
}

// WaitEvent waits for the next event matching filter that arrives after the call. It cannot see
// an event that arrived before it subscribed: to wait for an event a command causes, use Expect
// before Execute, or ExecuteAndWait. If ctx has no deadline, Options.DefaultTimeout applies.
func (m *Monitor) WaitEvent(ctx context.Context, filter func(Event) bool) (Event, error) {
	w := m.Expect(filter)
	defer w.Cancel()
	return w.Wait(ctx)
}

// ExecuteAndWait subscribes to filter, runs cmd like Execute, then waits for the first matching
// event, which may have arrived before the command's reply. ctx bounds both steps.
//
// Example: ExecuteAndWait(ctx, "stop", nil, nil, EventNamed("STOP")).
func (m *Monitor) ExecuteAndWait(ctx context.Context, cmd string, args, reply any, filter func(Event) bool) (Event, error) {
	w := m.Expect(filter)
	defer w.Cancel()
	if err := m.Execute(ctx, cmd, args, reply); err != nil {
		return Event{}, err
	}
	return w.Wait(ctx)
}

// Waiter is a subscription made now and waited on later. See Expect.
type Waiter struct {
	m      *Monitor
	events <-chan Event
	cancel func()
}

// Expect subscribes to filter at once, so that a later Wait sees matching events that arrive in
// between (e.g. while the command that causes them runs). Always call Cancel.
func (m *Monitor) Expect(filter func(Event) bool) *Waiter {
	events, cancel := m.Subscribe(filter)
	return &Waiter{m: m, events: events, cancel: cancel}
}

// Wait returns the next matching event. It fails with ErrTimeout when ctx's deadline (or, if
// ctx has none, Options.DefaultTimeout) passes, and with ErrDisconnected when the connection is
// gone and no matching event is left.
func (w *Waiter) Wait(ctx context.Context) (Event, error) {
	limit := w.m.opts.DefaultTimeout
	if limit <= 0 {
		limit = DefaultCommandTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		limit = max(time.Until(dl), 0)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	select {
	case e, ok := <-w.events:
		if !ok {
			return Event{}, w.gone()
		}
		return e, nil
	case <-ctx.Done():
		if ctx.Err() == context.Canceled {
			return Event{}, fmt.Errorf("wait for event: %w", ctx.Err())
		}
		return Event{}, timeoutError("event", limit)
	}
}

func (w *Waiter) gone() error {
	select {
	case <-w.m.done:
		return w.m.Err()
	default:
		return ErrClosed // cancelled by Cancel while waiting
	}
}

// Cancel ends the subscription. It is idempotent.
func (w *Waiter) Cancel() { w.cancel() }

// subscriber is one Subscribe call: an unbounded queue drained into out by pump.
type subscriber struct {
	filter func(Event) bool

	mu       sync.Mutex
	queue    []Event
	finished bool // the connection is gone: deliver what is queued, then close out

	wake   chan struct{} // capacity 1: "queue or finished changed"
	stop   chan struct{} // closed by cancel
	out    chan Event
	exited chan struct{} // closed when pump returns
}

func (s *subscriber) push(e Event) {
	s.mu.Lock()
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	s.notify()
}

func (s *subscriber) finish() {
	s.mu.Lock()
	s.finished = true
	s.mu.Unlock()
	s.notify()
}

func (s *subscriber) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) pump() {
	defer close(s.exited)
	defer close(s.out)
	for {
		s.mu.Lock()
		batch, finished := s.queue, s.finished
		s.queue = nil
		s.mu.Unlock()
		for _, e := range batch {
			select {
			case s.out <- e:
			case <-s.stop:
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		if finished {
			return
		}
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}
