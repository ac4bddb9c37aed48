package launcher

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// debugCommandTimeout bounds one command from a qmp-debug.sock client.
const debugCommandTimeout = 60 * time.Second

// debugProxy serves qmp-debug.sock: a QMP server for humans (socat, qmp-shell) that proxies
// every command through the launcher's own monitor connection (ExecuteRaw) and forwards every
// event, so the launcher stays in control and sees every state change (it watches the same
// events). Any number of clients may connect; each gets its own greeting, capability
// negotiation and event stream. OOB is not offered, and file descriptors (getfd) cannot be
// passed through.
type debugProxy struct {
	d    *domain
	path string
	lis  net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	once   sync.Once
}

func newDebugProxy(d *domain, path string) (*debugProxy, error) {
	lis, err := listenUnix(path)
	if err != nil {
		return nil, err
	}
	return &debugProxy{d: d, path: path, lis: lis, conns: map[net.Conn]struct{}{}}, nil
}

// serve accepts clients until close.
func (p *debugProxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			p.wg.Wait()
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.session(c)
			p.mu.Lock()
			delete(p.conns, c)
			p.mu.Unlock()
			c.Close()
		}()
	}
}

// close stops accepting, disconnects every client and removes the socket. Idempotent.
func (p *debugProxy) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.lis.Close()
		os.Remove(p.path)
	})
}

// debugConn is one client.
type debugConn struct {
	p   *debugProxy
	c   net.Conn
	wmu sync.Mutex
}

func (dc *debugConn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode qmp message: %w", err)
	}
	dc.wmu.Lock()
	defer dc.wmu.Unlock()
	_ = dc.c.SetWriteDeadline(time.Now().Add(10 * time.Second)) // a stuck client must not stall events
	_, err = dc.c.Write(append(b, '\r', '\n'))
	return err
}

func qmpErr(class, desc string, id json.RawMessage) map[string]any {
	m := map[string]any{"error": map[string]string{"class": class, "desc": desc}}
	if id != nil {
		m["id"] = id
	}
	return m
}

// session speaks QMP with one client: greeting, qmp_capabilities, then commands in order
// (like QEMU, one at a time) with events interleaved.
func (p *debugProxy) session(c net.Conn) {
	dc := &debugConn{p: p, c: c}
	mon := p.d.vm.Monitor()
	v := mon.Greeting().Version
	greeting := map[string]any{"QMP": map[string]any{
		"version": map[string]any{
			"qemu":    map[string]int{"major": v.Major, "minor": v.Minor, "micro": v.Micro},
			"package": v.Package,
		},
		"capabilities": []string{},
	}}
	if dc.write(greeting) != nil {
		return
	}
	dec := json.NewDecoder(bufio.NewReader(c))
	negotiated := false
	var stopEvents func()
	defer func() {
		if stopEvents != nil {
			stopEvents()
		}
	}()
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			var syn *json.SyntaxError
			if errors.As(err, &syn) {
				_ = dc.write(qmpErr("GenericError", "JSON parse error: "+err.Error(), nil))
			}
			return
		}
		var cmd struct {
			Execute string          `json:"execute"`
			OOB     string          `json:"exec-oob"`
			ID      json.RawMessage `json:"id"`
			Args    struct {
				Enable []string `json:"enable"`
			} `json:"arguments"`
		}
		if err := json.Unmarshal(raw, &cmd); err != nil {
			if dc.write(qmpErr("GenericError", "QMP input must be a JSON object", nil)) != nil {
				return
			}
			continue
		}
		var reply any
		switch {
		case cmd.OOB != "":
			reply = qmpErr("GenericError", "out-of-band is not offered on qmp-debug.sock", cmd.ID)
		case cmd.Execute == "":
			reply = qmpErr("GenericError", "QMP input lacks member 'execute'", cmd.ID)
		case !negotiated && cmd.Execute != "qmp_capabilities":
			reply = qmpErr("CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'", cmd.ID)
		case !negotiated && len(cmd.Args.Enable) > 0:
			reply = qmpErr("GenericError", fmt.Sprintf("Capability '%s' not available", cmd.Args.Enable[0]), cmd.ID)
		case !negotiated:
			negotiated = true
			stopEvents = dc.forwardEvents(mon)
			reply = withOptionalID(map[string]any{"return": map[string]any{}}, cmd.ID)
		case cmd.Execute == "qmp_capabilities":
			reply = qmpErr("CommandNotFound", "Capabilities negotiation is already complete, command ignored", cmd.ID)
		default:
			r, err := p.execute(raw, cmd.ID)
			if err != nil {
				p.d.l.log.Debug("qmp-debug command failed", "err", err)
				return
			}
			reply = r
		}
		if dc.write(reply) != nil {
			return
		}
	}
}

// execute proxies one command and returns the reply with the client's id.
func (p *debugProxy) execute(raw json.RawMessage, id json.RawMessage) (json.RawMessage, error) {
	p.d.l.qlog.add(time.Now(), "cmd", originDebug, string(raw), "")
	ctx, cancel := context.WithTimeout(context.Background(), debugCommandTimeout)
	defer cancel()
	reply, err := p.d.vm.Monitor().ExecuteRaw(ctx, raw)
	if err := rawError(err); err != nil {
		return nil, err
	}
	return withID(reply, id)
}

func withOptionalID(m map[string]any, id json.RawMessage) map[string]any {
	if id != nil {
		m["id"] = id
	}
	return m
}

// forwardEvents relays every QMP event to the client until the returned stop is called or
// the monitor ends.
func (dc *debugConn) forwardEvents(mon *qmp.Monitor) (stop func()) {
	events, cancel := mon.Subscribe(nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range events {
			msg := map[string]any{"event": e.Name, "timestamp": map[string]int64{
				"seconds": e.Timestamp.Unix(), "microseconds": int64(e.Timestamp.Nanosecond() / 1000),
			}}
			if e.Data != nil {
				msg["data"] = e.Data
			}
			if dc.write(msg) != nil {
				dc.c.Close() // the session's reader ends too
				cancel()
			}
		}
	}()
	return func() { cancel(); <-done }
}
