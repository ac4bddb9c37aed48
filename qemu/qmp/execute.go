package qmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Execute runs QMP command cmd with args (nil for none; anything encoding/json turns into an
// object) and decodes its "return" value into reply (nil to ignore it). The deadline is the
// sooner of ctx's and the command's timeout (Options). A QMP error reply is returned as *Error
// (wrapped; use errors.As). If ctx ends first the error wraps ErrTimeout (deadline) or
// context.Canceled, and the late reply is discarded.
//
// Equivalent to: {"execute": cmd, "arguments": args, "id": N}.
func (m *Monitor) Execute(ctx context.Context, cmd string, args any, reply any) error {
	return m.ExecuteWithFiles(ctx, cmd, args, reply)
}

// ExecuteWithFiles is Execute with files passed alongside the command as SCM_RIGHTS ancillary
// data, for getfd ({"execute": "getfd", "arguments": {"fdname": "tap0"}}) and add-fd. It needs a
// unix socket connection. Only one file-passing command is in flight at a time, because QEMU
// keeps only the last set of received descriptors for the next getfd/add-fd to take. The files
// stay owned by the caller (QEMU gets duplicates).
func (m *Monitor) ExecuteWithFiles(ctx context.Context, cmd string, args any, reply any, files ...*os.File) error {
	c := command{Execute: cmd, ID: m.nextID.Add(1)}
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("encode %s arguments: %w", cmd, err)
		}
		if !bytes.Equal(raw, []byte("null")) {
			c.Arguments = raw
		}
	}
	line, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode %s: %w", cmd, err)
	}
	var oob []byte
	if len(files) > 0 {
		if oob, err = m.rights(files); err != nil {
			return fmt.Errorf("pass files to %s: %w", cmd, err)
		}
	}
	msg, err := m.roundTrip(ctx, cmd, c.ID, line, oob)
	runtime.KeepAlive(files) // the descriptors in oob must stay open until sent
	if err != nil {
		return err
	}
	if msg.err != nil {
		return fmt.Errorf("execute %s: %w", cmd, msg.err)
	}
	if reply != nil {
		if err := json.Unmarshal(msg.ret, reply); err != nil {
			return fmt.Errorf("decode %s reply: %w", cmd, err)
		}
	}
	return nil
}

// ExecuteRaw sends one raw JSON command object (as typed by a user of `vmctl qmp`) and returns
// the raw reply line. The client sets the command's "id" (replacing any given) so that the reply
// can be matched; the returned line carries that id. A QMP error reply returns the raw line and
// a wrapped *Error.
func (m *Monitor) ExecuteRaw(ctx context.Context, raw []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("parse raw command: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("parse raw command: %w: not an object", ErrProtocol)
	}
	var name string
	for _, key := range []string{"execute", "exec-oob"} {
		if v, ok := obj[key]; ok {
			if err := json.Unmarshal(v, &name); err != nil {
				return nil, fmt.Errorf("parse raw command %s: %w", key, err)
			}
			break
		}
	}
	if name == "" {
		return nil, fmt.Errorf("parse raw command: %w: no execute member", ErrProtocol)
	}
	id := m.nextID.Add(1)
	obj["id"] = formatID(id)
	line, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode raw command: %w", err)
	}
	msg, err := m.roundTrip(ctx, name, id, line, nil)
	if err != nil {
		return nil, err
	}
	if msg.err != nil {
		return msg.raw, fmt.Errorf("execute %s: %w", name, msg.err)
	}
	return msg.raw, nil
}

// roundTrip writes one command line (with oob as ancillary data) and waits for the reply with
// the same id.
func (m *Monitor) roundTrip(parent context.Context, name string, id uint64, line, oob []byte) (message, error) {
	limit := m.opts.timeout(name)
	if dl, ok := parent.Deadline(); ok && time.Until(dl) < limit {
		limit = max(time.Until(dl), 0)
	}
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	expired := func() error {
		if errors.Is(parent.Err(), context.Canceled) {
			return fmt.Errorf("execute %s: %w", name, context.Canceled)
		}
		return timeoutError(name, limit)
	}
	gone := func() error { return fmt.Errorf("execute %s: %w", name, m.errNow()) }

	ch := make(chan message, 1)
	m.mu.Lock()
	if m.pending == nil {
		m.mu.Unlock()
		return message{}, gone()
	}
	m.pending[id] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if m.pending != nil {
			delete(m.pending, id) // a reply arriving from now on is discarded
		}
		m.mu.Unlock()
	}()

	if oob != nil {
		if err := acquire(ctx, m.fdmu, m.done); err != nil {
			if ctx.Err() != nil {
				return message{}, expired()
			}
			return message{}, gone()
		}
		defer release(m.fdmu)
	}
	sent := time.Now()
	if err := m.write(ctx, name, line, oob, expired); err != nil {
		return message{}, err
	}
	select {
	case msg := <-ch:
		m.observe(name, sent, msg)
		return msg, nil
	case <-m.done:
		select {
		case msg := <-ch: // the reply made it in before the connection went
			m.observe(name, sent, msg)
			return msg, nil
		default:
			return message{}, gone()
		}
	case <-ctx.Done():
		return message{}, expired()
	}
}

// observe reports a replied command to Options.Observe.
func (m *Monitor) observe(name string, sent time.Time, msg message) {
	if m.opts.Observe != nil {
		m.opts.Observe(name, time.Since(sent), msg.err)
	}
}

// write sends line plus "\n" (and oob) under the write lock. A write that fails after sending
// part of the line leaves the stream corrupt, so it takes the connection down.
func (m *Monitor) write(ctx context.Context, name string, line, oob []byte, expired func() error) error {
	if err := acquire(ctx, m.wmu, m.done); err != nil {
		if ctx.Err() != nil {
			return expired()
		}
		return fmt.Errorf("execute %s: %w", name, m.errNow())
	}
	defer release(m.wmu)

	m.tap(Sent, KindCommand, line)
	buf := append(line, '\n')
	dl, _ := ctx.Deadline()
	_ = m.conn.SetWriteDeadline(dl)
	defer func() { _ = m.conn.SetWriteDeadline(time.Time{}) }()
	var n int
	var err error
	if oob != nil {
		n, err = m.writeMsg(buf, oob)
	} else {
		n, err = m.conn.Write(buf)
	}
	if err == nil {
		return nil
	}
	var ne net.Error
	if n == 0 && errors.As(err, &ne) && ne.Timeout() {
		return expired() // nothing sent; the stream is intact
	}
	m.fail(fmt.Errorf("write %s: %w", name, err))
	return fmt.Errorf("execute %s: %w", name, m.errNow())
}

// errNow returns the recorded disconnect cause, even while the reader is still winding down.
func (m *Monitor) errNow() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		return ErrDisconnected
	}
	return m.err
}

// rights builds the SCM_RIGHTS control message for files. The connection must be a unix socket.
func (m *Monitor) rights(files []*os.File) ([]byte, error) {
	if _, ok := m.conn.(*net.UnixConn); !ok {
		return nil, ErrNotUnixSocket
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		// SyscallConn, unlike Fd, leaves the descriptor's blocking mode alone.
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, fmt.Errorf("get descriptor of %s: %w", f.Name(), err)
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return nil, fmt.Errorf("get descriptor of %s: %w", f.Name(), err)
		}
	}
	return unix.UnixRights(fds...), nil
}

// writeMsg sends buf with oob attached to its first byte (sendmsg), then any remainder.
func (m *Monitor) writeMsg(buf, oob []byte) (int, error) {
	uc := m.conn.(*net.UnixConn) // checked by rights
	n, _, err := uc.WriteMsgUnix(buf, oob, nil)
	if err != nil || n == len(buf) {
		return n, err
	}
	n2, err := uc.Write(buf[n:])
	return n + n2, err
}

func acquire(ctx context.Context, sem chan struct{}, done <-chan struct{}) error {
	select {
	case sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return ErrDisconnected
	}
}

func release(sem chan struct{}) { <-sem }
