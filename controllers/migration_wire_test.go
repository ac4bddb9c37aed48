package controllers_test

import (
	"context"
	"net"
	"sync"

	"github.com/vmlet/vmlet/controllers"
)

// wire records the start of every connection the source agents' relays dial to the other
// node: what travels on the network between the nodes.
type wire struct {
	mu    sync.Mutex
	heads [][]byte // the first bytes written on each connection, in dial order
}

// tap wraps m's Dial (a startTwoNodes wrap).
func (w *wire) tap(m *controllers.MigrationNet) *controllers.MigrationNet {
	dial := m.Dial
	m.Dial = func(ctx context.Context, a string) (net.Conn, error) {
		c, err := dial(ctx, a)
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.heads = append(w.heads, nil)
		return &headConn{Conn: c, w: w, i: len(w.heads) - 1}, nil
	}
	return m
}

// take returns the heads recorded since the last take.
func (w *wire) take() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.heads
	w.heads = nil
	return h
}

// headLen is how much of each connection's start is kept.
const headLen = 16

type headConn struct {
	net.Conn
	w *wire
	i int
}

func (c *headConn) Write(p []byte) (int, error) {
	c.w.mu.Lock()
	if c.i < len(c.w.heads) && len(c.w.heads[c.i]) < headLen {
		n := min(headLen-len(c.w.heads[c.i]), len(p))
		c.w.heads[c.i] = append(c.w.heads[c.i], p[:n]...)
	}
	c.w.mu.Unlock()
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection, as the relay does at the end of a stream.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
