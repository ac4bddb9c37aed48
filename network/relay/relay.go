package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dial connects to the peer of one accepted connection.
type Dial func(ctx context.Context) (net.Conn, error)

// Relay accepts on a listener and copies each connection to a freshly dialed peer.
type Relay struct {
	ln   net.Listener
	dial Dial

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}

	accepted atomic.Int64
	bytes    atomic.Int64
	errMu    sync.Mutex
	lastErr  error
}

// HandshakeTimeout bounds the handshake of an accepted connection that has one (a TLS
// listener's): its peer is dialed only once it succeeded.
const HandshakeTimeout = 30 * time.Second

// handshaker is an accepted connection with a handshake (*tls.Conn).
type handshaker interface {
	HandshakeContext(ctx context.Context) error
}

// Start serves ln until Close: every accepted connection is relayed to a connection dial
// returns. A failed dial closes the accepted connection (the peer sees EOF) and is kept as Err.
// An accepted connection with a handshake (ln a TLS listener) is relayed only once its
// handshake succeeded; a failed one (a peer without a valid certificate) is closed without a
// dial and kept as Err.
func Start(ln net.Listener, dial Dial) *Relay {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Relay{ln: ln, dial: dial, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r
}

// Addr is the listener's address.
func (r *Relay) Addr() net.Addr { return r.ln.Addr() }

// Accepted is how many connections the relay took so far.
func (r *Relay) Accepted() int64 { return r.accepted.Load() }

// Bytes is how many bytes it copied so far, both ways.
func (r *Relay) Bytes() int64 { return r.bytes.Load() }

// Err is the last dial or copy error (nil when every stream ended cleanly).
func (r *Relay) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.lastErr
}

// Close stops accepting, cuts every relayed connection and waits for the copies to end.
func (r *Relay) Close() error {
	r.cancel()
	err := r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (r *Relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed (Close) or broken: nothing more to relay
		}
		r.accepted.Add(1)
		if !r.track(c) {
			_ = c.Close()
			return
		}
		r.wg.Add(1)
		go r.relay(c)
	}
}

// track records c for Close; false once the relay is closing.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	_ = c.Close()
}

func (r *Relay) fail(err error) {
	r.errMu.Lock()
	r.lastErr = err
	r.errMu.Unlock()
}

func (r *Relay) relay(in net.Conn) {
	defer r.wg.Done()
	defer r.untrack(in)
	if h, ok := in.(handshaker); ok {
		ctx, cancel := context.WithTimeout(r.ctx, HandshakeTimeout)
		err := h.HandshakeContext(ctx)
		cancel()
		if err != nil {
			r.fail(fmt.Errorf("handshake with %s: %w", in.RemoteAddr(), err))
			return
		}
	}
	out, err := r.dial(r.ctx)
	if err != nil {
		r.fail(err)
		return
	}
	if !r.track(out) {
		_ = out.Close()
		return
	}
	defer r.untrack(out)
	done := make(chan error, 2)
	go func() { done <- r.copy(out, in) }()
	go func() { done <- r.copy(in, out) }()
	// One direction ending (EOF) half-closes the other side; the stream is over when both
	// ended, or at once on an error.
	err1 := <-done
	if err1 != nil {
		_ = in.Close()
		_ = out.Close()
	}
	err2 := <-done
	if err := errors.Join(err1, err2); err != nil && r.ctx.Err() == nil {
		r.fail(err)
	}
}

// copy copies src to dst and half-closes dst's write side at src's EOF.
func (r *Relay) copy(dst, src net.Conn) error {
	n, err := io.Copy(dst, src)
	r.bytes.Add(n)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	return nil
}
