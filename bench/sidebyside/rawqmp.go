package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// rawQMP is the floor's QMP client: one unix connection, one command in flight, JSON lines
// parsed just enough to tell replies from events. Events are kept for waitEvent.
type rawQMP struct {
	conn   net.Conn
	mu     sync.Mutex // one command at a time
	enc    *json.Encoder
	replys chan qmpMsg
	evMu   sync.Mutex
	events []qmpMsg
	evCh   chan struct{} // closed and replaced when an event arrives
	done   chan struct{} // closed when the reader ends
	err    error
}

type qmpMsg struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
	QMP   json.RawMessage `json:"QMP"`
}

// errQMP is a QMP error reply.
var errQMP = errors.New("qmp error reply")

// dialRawQMP connects to path, reads the greeting and negotiates capabilities
// (qmp_capabilities), all before ctx ends.
func dialRawQMP(ctx context.Context, path string) (*rawQMP, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dial qmp %s: %w", path, err)
	}
	q := &rawQMP{conn: conn, enc: json.NewEncoder(conn), replys: make(chan qmpMsg, 1),
		evCh: make(chan struct{}), done: make(chan struct{})}
	greeting := make(chan qmpMsg, 1)
	go q.read(greeting)
	select {
	case <-greeting:
	case <-q.done:
		conn.Close()
		return nil, fmt.Errorf("read qmp greeting: %w", q.err)
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("read qmp greeting: %w", ctx.Err())
	}
	if _, err := q.run(ctx, "qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *rawQMP) read(greeting chan<- qmpMsg) {
	defer close(q.done)
	sc := bufio.NewScanner(q.conn)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m qmpMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			q.err = fmt.Errorf("decode qmp line: %w", err)
			return
		}
		switch {
		case m.QMP != nil:
			greeting <- m
		case m.Event != "":
			q.evMu.Lock()
			q.events = append(q.events, m)
			close(q.evCh)
			q.evCh = make(chan struct{})
			q.evMu.Unlock()
		default:
			q.replys <- m
		}
	}
	q.err = sc.Err()
	if q.err == nil {
		q.err = errors.New("connection closed")
	}
}

// run executes cmd with args and returns the "return" value.
func (q *rawQMP) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = q.conn.SetWriteDeadline(dl) // a unix socket: cannot fail while open
	}
	if err := q.enc.Encode(req); err != nil {
		return nil, fmt.Errorf("send qmp %s: %w", cmd, err)
	}
	select {
	case m := <-q.replys:
		if m.Error != nil {
			return nil, fmt.Errorf("qmp %s: %w: %s: %s", cmd, errQMP, m.Error.Class, m.Error.Desc)
		}
		return m.Return, nil
	case <-q.done:
		return nil, fmt.Errorf("qmp %s: %w", cmd, q.err)
	case <-ctx.Done():
		return nil, fmt.Errorf("qmp %s: %w", cmd, ctx.Err())
	}
}

// waitEvent waits for the first event at index ≥ from named name whose data match accepts
// (nil: any) and returns the index after it.
func (q *rawQMP) waitEvent(ctx context.Context, from int, name string, match func(json.RawMessage) bool) (int, error) {
	for {
		q.evMu.Lock()
		for i := from; i < len(q.events); i++ {
			if e := q.events[i]; e.Event == name && (match == nil || match(e.Data)) {
				q.evMu.Unlock()
				return i + 1, nil
			}
		}
		from = len(q.events)
		ch := q.evCh
		q.evMu.Unlock()
		select {
		case <-ch:
		case <-q.done:
			return 0, fmt.Errorf("wait for qmp event %s: %w", name, q.err)
		case <-ctx.Done():
			return 0, fmt.Errorf("wait for qmp event %s: %w", name, ctx.Err())
		}
	}
}

// eventCount is the number of events received so far (a starting point for waitEvent).
func (q *rawQMP) eventCount() int {
	q.evMu.Lock()
	defer q.evMu.Unlock()
	return len(q.events)
}

// status runs query-status and returns the run state ("running", "paused", ...).
func (q *rawQMP) status(ctx context.Context) (string, error) {
	raw, err := q.run(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("decode query-status: %w", err)
	}
	return st.Status, nil
}

func (q *rawQMP) close() { q.conn.Close() }

// migrationInfo is the part of query-migrate the benchmark reports.
type migrationInfo struct {
	Status    string `json:"status"`
	TotalTime int64  `json:"total-time"` // ms
	Downtime  int64  `json:"downtime"`   // ms
	Setup     int64  `json:"setup-time"` // ms
	RAM       struct {
		Transferred    int64 `json:"transferred"`
		DirtySyncCount int64 `json:"dirty-sync-count"`
	} `json:"ram"`
	ErrorDesc string `json:"error-desc"`
}

func (q *rawQMP) queryMigrate(ctx context.Context) (migrationInfo, error) {
	var mi migrationInfo
	raw, err := q.run(ctx, "query-migrate", nil)
	if err != nil {
		return mi, err
	}
	if err := json.Unmarshal(raw, &mi); err != nil {
		return mi, fmt.Errorf("decode query-migrate: %w", err)
	}
	return mi, nil
}

// completedInfo reads query-migrate after MIGRATION completed. QEMU 7.2 may say completed
// before total-time and downtime are filled in (NOTES.md): it reads again every 10 ms until
// they are, bounded by ctx.
func (q *rawQMP) completedInfo(ctx context.Context) (migrationInfo, error) {
	for {
		mi, err := q.queryMigrate(ctx)
		if err != nil || (mi.Status == "completed" && mi.TotalTime > 0 && mi.Downtime > 0) {
			return mi, err
		}
		if mi.Status != "completed" {
			return mi, fmt.Errorf("read migration result: status %s: %s", mi.Status, mi.ErrorDesc)
		}
		t := time.NewTimer(10 * time.Millisecond) // QEMU fills the numbers in its own time: re-read
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return mi, fmt.Errorf("read migration result: %w", ctx.Err())
		}
	}
}
