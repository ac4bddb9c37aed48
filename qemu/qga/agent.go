package qga

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// delimiter is the byte that resets the agent's JSON parser when sent, and that the agent puts
// before its reply to guest-sync-delimited.
const delimiter = 0xFF

// noReply are the commands qemu-ga does not answer on success ("success-response": false).
// Shutdown handles guest-shutdown; Execute only writes the others.
var noReply = map[string]bool{
	"guest-shutdown": true, "guest-suspend-disk": true, "guest-suspend-ram": true, "guest-suspend-hybrid": true,
}

// Agent is a guest-agent connection. Requests are serialized; it is safe for concurrent use.
type Agent struct {
	conn   net.Conn
	r      *bufio.Reader
	opts   Options
	prefix string // random per Agent: ids of another client's commands never match ours

	sem    chan struct{} // one request at a time, first come first served; see acquire
	synced bool          // guarded by sem: the stream is known clean since the last sync
	seq    uint64        // guarded by sem

	mu      sync.Mutex
	broken  error     // set once the connection is unusable (EOF, Close)
	holder  string    // the command holding sem ("" when free), for ErrBusy messages
	heldFor time.Time // when holder got sem
}

// Dial connects to the agent's virtio-serial unix socket. It does not wait for the agent to
// answer: the guest may still be booting. The first request synchronises (see Sync).
func Dial(ctx context.Context, path string, opts Options) (*Agent, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("dial guest agent socket: %w", err)
	}
	return New(conn, opts), nil
}

// New returns an Agent over an established connection (tests use net.Pipe).
func New(conn net.Conn, opts Options) *Agent {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return &Agent{
		conn:   conn,
		r:      bufio.NewReaderSize(conn, 64<<10),
		opts:   opts,
		prefix: "vmlet-" + hex.EncodeToString(b[:]) + "-",
		sem:    make(chan struct{}, 1),
	}
}

// Close closes the connection. Pending and later requests fail with ErrDisconnected.
func (a *Agent) Close() error {
	a.setBroken(ErrClosed)
	if err := a.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("close guest agent socket: %w", err)
	}
	return nil
}

func (a *Agent) setBroken(cause error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.broken == nil {
		a.broken = fmt.Errorf("%w: %w", ErrDisconnected, cause)
	}
}

func (a *Agent) brokenErr() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.broken
}

// Sync resynchronises the stream now: 0xFF, then guest-sync-delimited with a random id, and
// everything up to the agent's matching reply is discarded. Requests do this by themselves when
// needed; call it to probe that the agent is answering.
//
// Equivalent to: printf '\xff{"execute":"guest-sync-delimited","arguments":{"id":N}}\n'.
func (a *Agent) Sync(ctx context.Context) error {
	return a.do(ctx, "guest-sync-delimited", func(ctx context.Context) error {
		a.synced = false
		return a.sync("guest-sync-delimited")
	})
}

// Execute runs agent command cmd with args (nil for none) and decodes "return" into reply (nil
// to ignore it). For commands that send no reply on success (guest-suspend-*) it returns once
// the command is written; Shutdown confirms its outcome instead.
//
// Equivalent to: {"execute": cmd, "arguments": args, "id": "vmlet-…"}.
func (a *Agent) Execute(ctx context.Context, cmd string, args, reply any) error {
	rawArgs, err := encodeArgs(cmd, args)
	if err != nil {
		return err
	}
	return a.do(ctx, cmd, func(ctx context.Context) error {
		if !a.synced {
			if err := a.sync(cmd); err != nil {
				return err
			}
		}
		id, err := a.send(cmd, rawArgs)
		if err != nil {
			return err
		}
		if noReply[cmd] {
			a.synced = false // an error reply, if any, must not be read as another's answer
			return nil
		}
		ret, err := a.readReply(id)
		if err != nil {
			return err
		}
		if reply != nil {
			if err := json.Unmarshal(ret, reply); err != nil {
				return fmt.Errorf("decode %s reply: %w", cmd, err)
			}
		}
		return nil
	})
}

func encodeArgs(cmd string, args any) (json.RawMessage, error) {
	if args == nil {
		return nil, nil
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode %s arguments: %w", cmd, err)
	}
	if bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	return raw, nil
}

// send writes one request with a fresh id and returns the id. Called under the request lock.
func (a *Agent) send(cmd string, args json.RawMessage) (string, error) {
	a.seq++
	req := struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		ID        string          `json:"id"`
	}{cmd, args, a.prefix + strconv.FormatUint(a.seq, 10)}
	line, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", cmd, err)
	}
	return req.ID, a.write(line)
}

// do runs fn holding the request lock, with the connection's deadline set to the request's and
// cleared on ctx cancellation. The request's deadline (Options.timeout, or ctx's if sooner)
// starts once it holds the lock: waiting behind other requests is bounded separately (see
// acquire) and fails with ErrBusy, never ErrTimeout. Any transport failure leaves the stream
// unsynchronised.
func (a *Agent) do(ctx context.Context, cmd string, fn func(context.Context) error) error {
	if err := a.acquire(ctx, cmd); err != nil {
		return err
	}
	defer a.release()
	if err := a.brokenErr(); err != nil {
		return fmt.Errorf("execute %s: %w", cmd, err)
	}
	if err := ctx.Err(); err != nil { // ended while we took the lock: nothing was sent
		return fmt.Errorf("execute %s: %w", cmd, err)
	}
	limit := a.opts.timeout(cmd)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < limit {
		limit = max(time.Until(dl), 0)
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	expired := func(parent error) error {
		if errors.Is(parent, context.Canceled) {
			return fmt.Errorf("execute %s: %w", cmd, context.Canceled)
		}
		return fmt.Errorf("%w: %q after %s (%w)", ErrTimeout, cmd, limit.Round(time.Millisecond), context.DeadlineExceeded)
	}

	dl, _ := ctx.Deadline()
	_ = a.conn.SetDeadline(dl)
	var mu sync.Mutex // orders the AfterFunc's deadline change against our reset below
	done := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			_ = a.conn.SetDeadline(time.Unix(1, 0)) // wake a blocked read or write now
		}
	})
	err := fn(ctx)
	stop()
	mu.Lock()
	done = true
	_ = a.conn.SetDeadline(time.Time{})
	mu.Unlock()
	if err == nil {
		return nil
	}
	a.synced = false
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return expired(ctx.Err())
	case peerGone(err), errors.Is(err, net.ErrClosed):
		a.setBroken(err)
		return fmt.Errorf("execute %s: %w", cmd, a.brokenErr())
	}
	return err
}

// acquire takes the request lock for cmd, waiting in line (channel senders are served in
// order) at most Options.QueueTimeout and not past ctx. A wait that ends first is ErrBusy
// (with context.DeadlineExceeded if ctx's deadline ended it) or context.Canceled: the
// request was not sent.
func (a *Agent) acquire(ctx context.Context, cmd string) error {
	select {
	case a.sem <- struct{}{}:
		a.hold(cmd)
		return nil
	default:
	}
	queued := time.Now()
	t := time.NewTimer(a.opts.queueTimeout())
	defer t.Stop()
	select {
	case a.sem <- struct{}{}:
		a.hold(cmd)
		return nil
	case <-t.C:
		return a.busy(cmd, queued, nil)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			return fmt.Errorf("execute %s: %w", cmd, context.Canceled)
		}
		return a.busy(cmd, queued, context.DeadlineExceeded)
	}
}

func (a *Agent) hold(cmd string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holder, a.heldFor = cmd, time.Now()
}

func (a *Agent) release() {
	a.mu.Lock()
	a.holder = ""
	a.mu.Unlock()
	<-a.sem
}

// busy is the ErrBusy of cmd, queued since queued, naming what holds the channel now.
func (a *Agent) busy(cmd string, queued time.Time, cause error) error {
	a.mu.Lock()
	holder, since := a.holder, a.heldFor
	a.mu.Unlock()
	waited := time.Since(queued).Round(time.Millisecond)
	var err error
	if holder == "" {
		err = fmt.Errorf("%w: %q not sent after waiting %s in line", ErrBusy, cmd, waited)
	} else {
		err = fmt.Errorf("%w: %q not sent after waiting %s in line; %q has held the channel for %s",
			ErrBusy, cmd, waited, holder, time.Since(since).Round(time.Millisecond))
	}
	if cause != nil {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return err
}
