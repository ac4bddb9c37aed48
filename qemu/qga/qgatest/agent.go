package qgatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
)

// ErrNoConn means no client is connected.
var ErrNoConn = errors.New("qgatest: no client connected")

// Error is a scripted error reply.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

// Handler answers one request: ret becomes {"return": ret} (nil: {}), or errReply the error.
// Return NoReply to send nothing, like qemu-ga after a successful guest-shutdown.
type Handler func(args json.RawMessage) (ret any, errReply *Error)

type noReply struct{}

// NoReply suppresses the reply when a Handler returns it.
var NoReply any = noReply{}

// Options configure the fake.
type Options struct {
	Version  string // guest-info version; "" means "7.2.22"
	NoEchoID bool   // do not echo request ids (agents older than QEMU 2.12 behave so)
}

// Request is one request the fake parsed.
type Request struct {
	Name      string
	Args      json.RawMessage
	ID        json.RawMessage
	Raw       []byte
	Delimited bool // a 0xFF byte came right before it
}

// Agent is the fake guest agent. It serves one connection at a time.
type Agent struct {
	opts Options

	mu       sync.Mutex
	handlers map[string]Handler
	requests []Request
	arrived  chan struct{}
	conn     net.Conn
	out      *outbox // the current connection's send queue
	held     bool
	backlog  []byte // input received while held
	closed   bool
	ln       net.Listener

	procMu    sync.Mutex // input is processed in order by one goroutine at a time
	partial   []byte     // guarded by procMu: the current unterminated line
	delimited bool       // guarded by procMu: 0xFF seen since the last line

	wg sync.WaitGroup
}

// New returns a fake answering guest-sync-delimited, guest-sync, guest-ping, guest-info
// (listing the handled commands) and guest-shutdown (no reply); others get CommandNotFound
// until scripted with Handle.
func New(opts Options) *Agent {
	if opts.Version == "" {
		opts.Version = "7.2.22"
	}
	a := &Agent{opts: opts, handlers: map[string]Handler{}, arrived: make(chan struct{})}
	a.handlers["guest-ping"] = func(json.RawMessage) (any, *Error) { return nil, nil }
	a.handlers["guest-sync"] = func(args json.RawMessage) (any, *Error) {
		var p struct{ ID json.RawMessage }
		_ = json.Unmarshal(args, &p)
		return p.ID, nil
	}
	a.handlers["guest-shutdown"] = func(json.RawMessage) (any, *Error) { return NoReply, nil }
	a.handlers["guest-info"] = a.info
	return a
}

// Handle scripts the answer to cmd (replacing any earlier handler for it).
func (a *Agent) Handle(cmd string, h Handler) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.handlers[cmd] = h
}

func (a *Agent) info(json.RawMessage) (any, *Error) {
	a.mu.Lock()
	names := []string{"guest-sync-delimited"}
	for n := range a.handlers {
		names = append(names, n)
	}
	a.mu.Unlock()
	sort.Strings(names)
	type cmd struct {
		Name            string `json:"name"`
		Enabled         bool   `json:"enabled"`
		SuccessResponse bool   `json:"success-response"`
	}
	cmds := make([]cmd, 0, len(names))
	for _, n := range names {
		cmds = append(cmds, cmd{Name: n, Enabled: true, SuccessResponse: n != "guest-shutdown"})
	}
	return map[string]any{"version": a.opts.Version, "supported_commands": cmds}, nil
}

// Hold makes the agent stop answering (guest rebooting, agent restarting): input is kept
// unprocessed until Release.
func (a *Agent) Hold() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held = true
}

// Release processes the input kept since Hold, in order, answering it now (late), and resumes.
func (a *Agent) Release() {
	a.procMu.Lock()
	defer a.procMu.Unlock()
	a.mu.Lock()
	backlog := a.backlog
	a.backlog, a.held = nil, false
	a.mu.Unlock()
	a.process(backlog)
}

// Inject writes raw bytes to the client as they are (stale replies, garbage, 0xFF).
func (a *Agent) Inject(raw []byte) error {
	a.mu.Lock()
	out := a.out
	a.mu.Unlock()
	if out == nil {
		return ErrNoConn
	}
	out.push(append([]byte(nil), raw...))
	return nil
}

// outbox is an unbounded send queue drained by one writer goroutine, so that the fake never
// blocks on a client that is not reading (net.Pipe has no buffer), like a socket buffer.
type outbox struct {
	mu    sync.Mutex
	queue [][]byte
	wake  chan struct{}
	stop  chan struct{}
}

func newOutbox() *outbox {
	return &outbox{wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (o *outbox) push(b []byte) {
	o.mu.Lock()
	o.queue = append(o.queue, b)
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// run writes queued data to conn until stop is closed or a write fails.
func (o *outbox) run(conn net.Conn) {
	for {
		o.mu.Lock()
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		for _, b := range batch {
			if _, err := conn.Write(b); err != nil {
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-o.wake:
		case <-o.stop:
			return
		}
	}
}

// CloseConn drops the client connection (QEMU exited).
func (a *Agent) CloseConn() error {
	a.mu.Lock()
	conn := a.conn
	a.mu.Unlock()
	if conn == nil {
		return ErrNoConn
	}
	return conn.Close()
}

// Requests returns the requests parsed so far.
func (a *Agent) Requests() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.requests...)
}

// WaitRequests waits until n requests called name have been parsed and returns them.
func (a *Agent) WaitRequests(ctx context.Context, name string, n int) ([]Request, error) {
	for {
		var got []Request
		a.mu.Lock()
		for _, r := range a.requests {
			if r.Name == name && len(got) < n {
				got = append(got, r)
			}
		}
		arrived := a.arrived
		a.mu.Unlock()
		if len(got) == n {
			return got, nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %d %s requests (have %d): %w", n, name, len(got), ctx.Err())
		}
	}
}
