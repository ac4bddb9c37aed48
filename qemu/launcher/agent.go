package launcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
)

// agentPingTimeout bounds one ping (with the resynchronisation before it when needed).
const agentPingTimeout = 2 * time.Second

// agentPoller keeps the launcher's one connection to the guest agent (QEMU serves one client
// on the channel's socket): it pings with a capped exponential back-off (Config.AgentRetryMin
// doubling to AgentRetryMax) while the agent does not answer, pings an answering agent every
// AgentPingInterval, and reports every change as an agent event. The socket stays connected
// across agent restarts and guest reboots (package qga resynchronises the stream); it is
// redialled only when QEMU closed it. RPCs borrow the connection with use. QGA has no "agent
// started" event (the host side of the virtio-serial port is always open), so polling is the
// only way.
type agentPoller struct {
	d      *domain
	socket string

	mu   sync.Mutex // held while a command runs on conn
	conn *qga.Agent // nil until dialled, and after QEMU closed it
	up   bool       // the last ping was answered

	kick chan struct{} // capacity 1: an RPC saw the agent fail, re-check now
	stop chan struct{}
	once sync.Once
}

func newAgentPoller(d *domain, socket string) *agentPoller {
	return &agentPoller{d: d, socket: socket, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (a *agentPoller) close() { a.once.Do(func() { close(a.stop) }) }

// backoff is a capped exponential back-off: min, 2·min, 4·min, ... up to max.
type backoff struct{ min, max, cur time.Duration }

// next returns the wait before the next attempt and doubles the following one.
func (b *backoff) next() time.Duration {
	if b.cur < b.min {
		b.cur = b.min
	}
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	return d
}

func (b *backoff) reset() { b.cur = b.min }

// run polls until close.
func (a *agentPoller) run() {
	cfg := a.d.l.cfg
	retry := &backoff{min: cfg.AgentRetryMin, max: cfg.AgentRetryMax}
	defer a.shutdown()
	for {
		wait := cfg.AgentPingInterval
		err := a.ping()
		switch {
		case err == nil && !a.isUp():
			a.d.l.log.Info("guest agent connected")
			a.setUp(true)
			retry.reset()
		case err != nil && a.isUp():
			a.d.l.log.Info("guest agent lost", "err", err)
			a.setUp(false)
			retry.reset()
			wait = retry.next()
		case err != nil:
			wait = retry.next()
			a.d.l.log.Debug("guest agent not answering", "err", err, "retry", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-a.stop:
			t.Stop()
			return
		case <-a.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

func (a *agentPoller) isUp() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.up
}

func (a *agentPoller) setUp(up bool) {
	a.mu.Lock()
	a.up = up
	a.mu.Unlock()
	a.d.setAgent(up)
}

// ping dials when needed and pings once; a closed socket is dropped for a redial next time.
func (a *agentPoller) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), agentPingTimeout)
	defer cancel()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil {
		c, err := qga.Dial(ctx, a.socket, qga.Options{DefaultTimeout: agentPingTimeout})
		if err != nil {
			return err
		}
		a.conn = c
	}
	err := a.conn.Ping(ctx)
	if errors.Is(err, qga.ErrDisconnected) {
		a.conn.Close()
		a.conn = nil
	}
	return err
}

// shutdown closes the connection and reports the agent gone.
func (a *agentPoller) shutdown() {
	a.mu.Lock()
	if a.conn != nil {
		a.conn.Close()
		a.conn = nil
	}
	a.mu.Unlock()
	if a.isUp() {
		a.setUp(false)
	}
}

// use runs f with the connection of an answering agent, one caller at a time:
// ErrAgentNotConnected when the agent does not answer (then the poller re-checks at once);
// ErrAgentCommand when the agent answered with an error.
func (a *agentPoller) use(ctx context.Context, f func(context.Context, *qga.Agent) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == nil || !a.up {
		return ErrAgentNotConnected
	}
	err := f(ctx, a.conn)
	if _, isAgentErr := errors.AsType[*qga.Error](err); isAgentErr {
		return fmt.Errorf("%w: %w", ErrAgentCommand, err)
	}
	if errors.Is(err, qga.ErrTimeout) || errors.Is(err, qga.ErrDisconnected) {
		select {
		case a.kick <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: %w", ErrAgentNotConnected, err)
	}
	return err
}
