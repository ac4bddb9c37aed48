package testguest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"
)

// Minimal raw QMP and guest-agent exchanges, enough to drive the fixture's tests. The real
// clients live in qemu/qmp and qemu/qga.

type qmpMsg struct {
	Return json.RawMessage                    `json:"return"`
	Error  *struct{ Class, Desc string }      `json:"error"`
	Event  string                             `json:"event"`
	Data   map[string]any                     `json:"data"`
	QMP    *struct{ Version json.RawMessage } `json:"QMP"`
}

type rawQMP struct {
	conn   net.Conn
	r      *bufio.Reader
	events []qmpMsg // events read while waiting for replies
}

// dialQMP connects, reads the greeting and negotiates capabilities (qmp_capabilities).
func dialQMP(t *testing.T, ctx context.Context, path string) *rawQMP {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		t.Fatalf("dial qmp: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	q := &rawQMP{conn: conn, r: bufio.NewReader(conn)}
	if m, err := q.read(ctx); err != nil || m.QMP == nil {
		t.Fatalf("read qmp greeting: %+v %v", m, err)
	}
	if _, err := q.run(ctx, "qmp_capabilities", nil); err != nil {
		t.Fatalf("negotiate qmp: %v", err)
	}
	return q
}

func (q *rawQMP) read(ctx context.Context) (qmpMsg, error) {
	var m qmpMsg
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	if err := q.conn.SetReadDeadline(deadline); err != nil {
		return m, fmt.Errorf("read qmp: %w", err)
	}
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return m, fmt.Errorf("read qmp: %w", err)
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return m, fmt.Errorf("decode qmp %q: %w", line, err)
	}
	return m, nil
}

// run executes one QMP command and returns its "return" value.
func (q *rawQMP) run(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	req, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
	if args == nil {
		req, err = json.Marshal(map[string]any{"execute": cmd})
	}
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", cmd, err)
	}
	if _, err := q.conn.Write(append(req, '\n')); err != nil {
		return nil, fmt.Errorf("send %s: %w", cmd, err)
	}
	for {
		m, err := q.read(ctx)
		switch {
		case err != nil:
			return nil, fmt.Errorf("run %s: %w", cmd, err)
		case m.Event != "":
			q.events = append(q.events, m)
		case m.Error != nil:
			return nil, fmt.Errorf("run %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		default:
			return m.Return, nil
		}
	}
}

// event waits for an event named name whose data matches all key/values in match.
func (q *rawQMP) event(ctx context.Context, name string, match map[string]any) (qmpMsg, error) {
	matches := func(m qmpMsg) bool {
		if m.Event != name {
			return false
		}
		for k, v := range match {
			if m.Data[k] != v {
				return false
			}
		}
		return true
	}
	for i, m := range q.events {
		if matches(m) {
			q.events = append(q.events[:i], q.events[i+1:]...)
			return m, nil
		}
	}
	for {
		m, err := q.read(ctx)
		if err != nil {
			return m, fmt.Errorf("wait for event %s: %w", name, err)
		}
		if matches(m) {
			return m, nil
		}
		if m.Event != "" {
			q.events = append(q.events, m)
		}
	}
}

// rawQGA is a guest-agent connection after the 0xFF + guest-sync-delimited handshake.
type rawQGA struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialQGA connects and resynchronises: it sends 0xFF then guest-sync-delimited and discards
// everything up to the agent's 0xFF (the agent answers the lone 0xFF with a parse error first).
func dialQGA(t *testing.T, ctx context.Context, path string) *rawQGA {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		t.Fatalf("dial qga: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			t.Fatalf("set qga deadline: %v", err)
		}
	}
	g := &rawQGA{conn: conn, r: bufio.NewReader(conn)}
	const id = 123
	if _, err := conn.Write([]byte("\xff{\"execute\":\"guest-sync-delimited\",\"arguments\":{\"id\":123}}\n")); err != nil {
		t.Fatalf("send guest-sync-delimited: %v", err)
	}
	if _, err := g.r.ReadBytes(0xff); err != nil {
		t.Fatalf("read qga sync delimiter: %v", err)
	}
	var got struct{ Return int }
	if err := g.readReply(&got); err != nil || got.Return != id {
		t.Fatalf("guest-sync-delimited: got %+v, %v; want return %d", got, err, id)
	}
	return g
}

func (g *rawQGA) readReply(v any) error {
	line, err := g.r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read qga: %w", err)
	}
	var m struct {
		Error *struct{ Class, Desc string }
	}
	if err := json.Unmarshal(line, &m); err != nil {
		return fmt.Errorf("decode qga %q: %w", line, err)
	}
	if m.Error != nil {
		return fmt.Errorf("qga: %s: %s", m.Error.Class, m.Error.Desc)
	}
	return json.Unmarshal(line, v)
}

// run executes one agent command and decodes its reply ({"return": ...}) into v.
func (g *rawQGA) run(cmd string, args any, v any) error {
	req, err := json.Marshal(map[string]any{"execute": cmd, "arguments": args})
	if err != nil {
		return fmt.Errorf("encode %s: %w", cmd, err)
	}
	if _, err := g.conn.Write(append(req, '\n')); err != nil {
		return fmt.Errorf("send %s: %w", cmd, err)
	}
	return g.readReply(v)
}
