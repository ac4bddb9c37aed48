package launcher

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// agentPingTimeout bounds one connect-and-ping attempt and each liveness ping.
const agentPingTimeout = 3 * time.Second

// agentPoller keeps the launcher's one connection to the guest agent: it connects and pings
// with a capped exponential back-off (Config.AgentRetryMin doubling to AgentRetryMax) while
// the agent does not answer, pings a connected agent every AgentPingInterval, and reports
// every change as an agent event. RPCs borrow the connection with use (one QGA command at a
// time: the channel is a byte stream with a single reader). QGA has no "agent started" event
// (the host side of the virtio-serial port is always open), so polling is the only way.
type agentPoller struct {
	d      *domain
	socket string

	mu     sync.Mutex // held while a command runs on client
	client agentClient

	kick chan struct{} // capacity 1: an RPC saw the agent fail, re-check now
	stop chan struct{}
	once sync.Once
}

func newAgentPoller(d *domain, socket string) *agentPoller {
	return &agentPoller{d: d, socket: socket, kick: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (a *agentPoller) close() { a.once.Do(func() { close(a.stop) }) }

// run polls until close.
func (a *agentPoller) run() {
	cfg := a.d.l.cfg
	backoff := cfg.AgentRetryMin
	defer a.disconnect()
	for {
		var wait time.Duration
		if a.connected() {
			if err := a.ping(); err != nil {
				a.d.l.log.Info("guest agent lost", "err", err)
				a.disconnect()
				backoff = cfg.AgentRetryMin
				continue
			}
			wait = cfg.AgentPingInterval
		} else if err := a.connect(); err != nil {
			a.d.l.log.Debug("guest agent not answering", "err", err, "retry", backoff)
			wait = backoff
			backoff = min(backoff*2, cfg.AgentRetryMax)
		} else {
			a.d.l.log.Info("guest agent connected")
			a.d.setAgent(true)
			backoff = cfg.AgentRetryMin
			wait = cfg.AgentPingInterval
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

func (a *agentPoller) connected() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.client != nil
}

// connect dials the agent socket and pings once.
func (a *agentPoller) connect() error {
	ctx, cancel := context.WithTimeout(context.Background(), agentPingTimeout)
	defer cancel()
	c, err := dialAgent(ctx, a.socket)
	if err != nil {
		return err
	}
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return err
	}
	a.mu.Lock()
	a.client = c
	a.mu.Unlock()
	return nil
}

func (a *agentPoller) ping() error {
	return a.use(context.Background(), func(ctx context.Context, c agentClient) error {
		ctx, cancel := context.WithTimeout(ctx, agentPingTimeout)
		defer cancel()
		return c.Ping(ctx)
	})
}

// disconnect drops the connection and reports the agent gone.
func (a *agentPoller) disconnect() {
	a.mu.Lock()
	c := a.client
	a.client = nil
	a.mu.Unlock()
	if c != nil {
		c.Close()
		a.d.setAgent(false)
	}
}

// use runs f with the connected client, one caller at a time. ErrAgentNotConnected when
// there is none; a failure of f makes the poller re-check the agent at once.
func (a *agentPoller) use(ctx context.Context, f func(context.Context, agentClient) error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client == nil {
		return ErrAgentNotConnected
	}
	if err := f(ctx, a.client); err != nil {
		select {
		case a.kick <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: %w", ErrAgentNotConnected, err)
	}
	return nil
}
