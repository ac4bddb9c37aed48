package qmp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Monitor is a QMP connection. It is safe for concurrent use.
type Monitor struct {
	conn     net.Conn
	opts     Options
	greeting Greeting
	greetCh  chan Greeting // the reader hands over the greeting once

	nextID atomic.Uint64
	wmu    chan struct{} // write lock that a context can give up on
	fdmu   chan struct{} // one file-passing command in flight at a time (QEMU keeps one fd set)
	tapMu  sync.Mutex

	events uint64 // events received so far (Event.Seq); the reader's alone

	mu      sync.Mutex
	pending map[uint64]chan message // nil once the connection is gone
	subs    map[*subscriber]struct{}
	err     error // why the connection is gone; set once

	done chan struct{} // closed when the reader has exited
}

// Dial connects to QEMU's QMP unix socket at path, reads the greeting and negotiates
// capabilities (qmp_capabilities with Options.Capabilities). ctx bounds the whole handshake.
//
// Equivalent to: socat - UNIX-CONNECT:path, then {"execute": "qmp_capabilities"}.
func Dial(ctx context.Context, path string, opts Options) (*Monitor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dial qmp socket: %w", err)
	}
	return New(ctx, conn, opts)
}

// New runs the QMP handshake over an established connection (a unix socket, or net.Pipe in
// tests) and starts the reader. On error conn is closed. ctx bounds the handshake only; the
// connection lives until Close or until the peer goes away.
func New(ctx context.Context, conn net.Conn, opts Options) (*Monitor, error) {
	m := &Monitor{
		conn:    conn,
		opts:    opts,
		greetCh: make(chan Greeting, 1),
		wmu:     make(chan struct{}, 1),
		fdmu:    make(chan struct{}, 1),
		pending: make(map[uint64]chan message),
		subs:    make(map[*subscriber]struct{}),
		done:    make(chan struct{}),
	}
	go m.readLoop()
	if err := m.handshake(ctx); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

func (m *Monitor) handshake(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, m.opts.timeout("qmp_capabilities"))
	defer cancel()
	select {
	case m.greeting = <-m.greetCh:
	case <-m.done:
		return fmt.Errorf("read greeting: %w", m.Err())
	case <-ctx.Done():
		return timeoutError("greeting", time.Since(start))
	}
	var args any
	if len(m.opts.Capabilities) > 0 {
		args = map[string][]string{"enable": m.opts.Capabilities}
	}
	if err := m.Execute(ctx, "qmp_capabilities", args, nil); err != nil {
		return fmt.Errorf("negotiate capabilities: %w", err)
	}
	return nil
}

// Greeting returns what QEMU announced on connect (version, offered capabilities).
func (m *Monitor) Greeting() Greeting { return m.greeting }

// Done is closed when the connection is gone (peer closed, I/O error, or Close).
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Err says why the connection is gone (wrapping ErrDisconnected), or nil while it is up.
func (m *Monitor) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pending != nil {
		return nil
	}
	return m.err
}

// Close closes the connection and waits for the reader to exit. Pending calls return
// ErrDisconnected (and ErrClosed). Subscribers still receive events already read, then their
// channels close. Close is idempotent.
func (m *Monitor) Close() error {
	m.fail(ErrClosed)
	<-m.done
	return nil
}

// fail records cause as the reason the connection is going away (first cause wins) and closes
// the connection so the reader exits.
func (m *Monitor) fail(cause error) {
	m.mu.Lock()
	if m.err == nil {
		m.err = fmt.Errorf("%w: %w", ErrDisconnected, cause)
	}
	m.mu.Unlock()
	_ = m.conn.Close()
}

// readLoop is the only reader of the connection. Lines may be of any length.
func (m *Monitor) readLoop() {
	r := bufio.NewReaderSize(m.conn, 64<<10)
	var cause error
	greeted := false
	for {
		line, err := r.ReadBytes('\n')
		if line = trimLine(line); len(line) > 0 {
			m.dispatch(line, &greeted)
		}
		if err != nil {
			cause = err
			break
		}
	}
	if errors.Is(cause, net.ErrClosed) || errors.Is(cause, io.ErrClosedPipe) {
		cause = io.EOF // we closed it; fail() below keeps an earlier, better cause
	}
	m.fail(cause)

	m.mu.Lock()
	m.pending = nil
	subs := m.subs
	m.subs = nil
	m.mu.Unlock()
	for s := range subs {
		s.finish()
	}
	close(m.done)
}

func (m *Monitor) dispatch(line []byte, greeted *bool) {
	msg, _ := decodeMessage(line) // undecodable lines are tapped as KindUnknown and ignored
	msg.raw = line
	m.tap(Received, msg.kind, line)
	switch msg.kind {
	case KindGreeting:
		if !*greeted {
			*greeted = true
			m.greetCh <- msg.greeting
		}
	case KindReply:
		if !msg.hasID {
			return // not a reply to any command of ours (we always send ids)
		}
		m.mu.Lock()
		ch := m.pending[msg.id]
		delete(m.pending, msg.id)
		m.mu.Unlock()
		if ch != nil {
			ch <- msg // buffered; a caller that gave up has unregistered, so ch is nil then
		}
	case KindEvent:
		m.events++
		msg.event.Seq = m.events
		m.publish(msg.event)
	}
}

func (m *Monitor) tap(dir Direction, kind string, raw []byte) {
	if m.opts.Tap == nil {
		return
	}
	rec := Record{Time: time.Now(), Dir: dir, Kind: kind, Raw: append([]byte(nil), raw...)}
	m.tapMu.Lock()
	defer m.tapMu.Unlock()
	m.opts.Tap(rec)
}

func timeoutError(what string, after time.Duration) error {
	return fmt.Errorf("%w: %q after %s (%w)", ErrTimeout, what, after.Round(time.Millisecond), context.DeadlineExceeded)
}
