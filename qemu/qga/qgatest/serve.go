package qgatest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"sync"
)

// Pipe serves one end of a net.Pipe and returns the other for the client.
func (a *Agent) Pipe() net.Conn {
	client, server := net.Pipe()
	out := a.attach(server) // before returning, so Inject works at once
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.serve(server, out)
	}()
	return client
}

// Listen serves clients on a unix socket at path, one at a time, until Close.
func (a *Agent) Listen(path string) error {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		_ = ln.Close()
		return ErrNoConn
	}
	a.ln = ln
	a.mu.Unlock()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			a.serve(conn, a.attach(conn))
		}
	}()
	return nil
}

// Close stops serving and waits for the fake's goroutines.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	ln, conn := a.ln, a.conn
	a.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	if conn != nil {
		_ = conn.Close()
	}
	a.wg.Wait()
	return nil
}

// attach makes conn the current client; nil if the fake is closed (conn is then closed).
func (a *Agent) attach(conn net.Conn) *outbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = conn.Close()
		return nil
	}
	out := newOutbox()
	a.conn, a.out = conn, out
	return out
}

func (a *Agent) serve(conn net.Conn, out *outbox) {
	if out == nil {
		return
	}
	var writer sync.WaitGroup
	writer.Go(func() { out.run(conn) })
	defer func() {
		a.mu.Lock()
		if a.conn == conn {
			a.conn, a.out = nil, nil
		}
		a.mu.Unlock()
		_ = conn.Close()
		close(out.stop)
		writer.Wait()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			a.procMu.Lock()
			a.mu.Lock()
			held := a.held
			if held {
				a.backlog = append(a.backlog, buf[:n]...)
			}
			a.mu.Unlock()
			if !held {
				a.process(buf[:n])
			}
			a.procMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// process parses input like qemu-ga: 0xFF resets the parser (answered with a parse error),
// lines are requests. Called with procMu held.
func (a *Agent) process(data []byte) {
	for _, c := range data {
		switch c {
		case 0xFF:
			a.partial = a.partial[:0]
			a.delimited = true
			a.send(map[string]any{"error": Error{Class: "GenericError", Desc: "JSON parse error, invalid input"}})
		case '\n':
			line := bytes.TrimSpace(a.partial)
			if len(line) > 0 {
				a.handle(append([]byte(nil), line...), a.delimited)
			}
			a.partial = a.partial[:0]
			a.delimited = false
		default:
			a.partial = append(a.partial, c)
		}
	}
}

func (a *Agent) handle(line []byte, delimited bool) {
	var req struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
		ID        json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(line, &req); err != nil {
		a.send(map[string]any{"error": Error{Class: "GenericError", Desc: "JSON parse error, " + err.Error()}})
		return
	}
	a.mu.Lock()
	a.requests = append(a.requests, Request{Name: req.Execute, Args: req.Arguments, ID: req.ID, Raw: line, Delimited: delimited})
	close(a.arrived)
	a.arrived = make(chan struct{})
	h := a.handlers[req.Execute]
	a.mu.Unlock()

	rep := map[string]any{}
	if req.ID != nil && !a.opts.NoEchoID {
		rep["id"] = req.ID
	}
	if req.Execute == "guest-sync-delimited" {
		var p struct{ ID json.RawMessage }
		_ = json.Unmarshal(req.Arguments, &p)
		rep["return"] = p.ID
		a.write(append([]byte{0xFF}, mustJSON(rep)...))
		return
	}
	if h == nil {
		rep["error"] = Error{Class: "CommandNotFound", Desc: fmt.Sprintf("The command %s has not been found", req.Execute)}
		a.send(rep)
		return
	}
	ret, errReply := h(req.Arguments)
	switch {
	case errReply != nil:
		rep["error"] = errReply
	case ret == NoReply:
		return
	case ret == nil:
		rep["return"] = struct{}{}
	default:
		rep["return"] = ret
	}
	a.send(rep)
}

func (a *Agent) send(v any) { a.write(mustJSON(v)) }

func (a *Agent) write(line []byte) {
	_ = a.Inject(append(line, '\n'))
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"error": Error{Class: "GenericError", Desc: "qgatest: cannot encode reply: " + err.Error()}})
	}
	return b
}
