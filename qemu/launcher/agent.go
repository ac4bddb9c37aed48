package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vmlet/vmlet/qemu/qga"
)

// Guest agent deadlines. Package qga starts a command's deadline when the command is sent, and
// bounds the wait behind other commands separately (agentQueueTimeout, then qga.ErrBusy).
const (
	agentPingTimeout  = 2 * time.Second
	agentQueueTimeout = 5 * time.Second
)

// agentCommandTimeouts is the deadline of every command the launcher sends to qemu-ga, from
// when it is sent (a resync before it, when one is needed, counts against it). qemu-ga is
// single-threaded and answers in order, so each is short and none waits for guest work:
// guest-exec returns a pid at once and GuestExec polls guest-exec-status. The launcher sends
// no synchronous long-running command (guest-fsfreeze-*, guest-shutdown, guest-file-* loops);
// one added must get an entry here (TestAgentCommandDeadlines checks the RPCs' commands).
var agentCommandTimeouts = map[string]time.Duration{
	"guest-ping":                   agentPingTimeout,
	"guest-info":                   5 * time.Second,
	"guest-get-osinfo":             5 * time.Second,
	"guest-get-host-name":          5 * time.Second,
	"guest-network-get-interfaces": 5 * time.Second,
	"guest-get-users":              5 * time.Second,
	"guest-get-fsinfo":             10 * time.Second, // statvfs of every mount
	"guest-exec":                   10 * time.Second, // fork + exec; input is written asynchronously
	"guest-exec-status":            5 * time.Second,
}

// agentOptions are the launcher's qga.Options.
func agentOptions() qga.Options {
	return qga.Options{
		DefaultTimeout:  agentPingTimeout,
		CommandTimeouts: agentCommandTimeouts,
		QueueTimeout:    agentQueueTimeout,
	}
}

// agentPoller keeps the launcher's one connection to the guest agent (QEMU serves one client
// on the channel's socket): it pings with a capped exponential back-off (Config.AgentRetryMin
// doubling to AgentRetryMax) while the agent does not answer, pings an answering agent every
// AgentPingInterval, and reports every change as an agent event. The socket stays connected
// across agent restarts and guest reboots (package qga resynchronises the stream); it is
// redialled only when QEMU closed it. RPCs borrow the connection with use; qga orders their
// commands and the pings on it one at a time, and no command holds it for long. QGA has no
// "agent started" event (the host side of the virtio-serial port is always open), so polling
// is the only way.
type agentPoller struct {
	d      *domain
	log    *slog.Logger
	socket string

	mu        sync.Mutex   // guards the fields below; never held while a command runs
	conn      *qga.Agent   // nil until dialled, and after QEMU closed it
	up        bool         // the last verdict was "answers"
	abandoned map[int]bool // guest pids that outlived their GuestExec, see reap

	kick     chan struct{} // capacity 1: an RPC saw the agent fail, re-check now
	infoKick chan struct{} // capacity 1: a NIC came or went, poll the guest's info now

	infoMu      sync.Mutex // one guest info round at a time (agent_info.go)
	version     qga.Info   // the last guest-info answer, and when it was asked
	versionRead time.Time
	stop        chan struct{}
	once        sync.Once
}

func newAgentPoller(d *domain, socket string) *agentPoller {
	return &agentPoller{d: d, log: d.l.log, socket: socket, kick: make(chan struct{}, 1), infoKick: make(chan struct{}, 1), stop: make(chan struct{})}
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

// verdict is what one liveness ping says about the agent.
type verdict int

const (
	agentAnswers verdict = iota
	agentSilent          // a command was sent and not answered in time, or no connection
	agentBusy            // the ping was not sent: commands within their deadlines held the channel
)

// pingVerdict classifies a ping's error. Only an unanswered command (or no connection) means
// the agent is gone; a ping that could not be sent because the channel was busy says nothing:
// whatever holds it is bounded by its own deadline, and its timeout kicks a new ping.
func pingVerdict(err error) verdict {
	switch {
	case err == nil:
		return agentAnswers
	case errors.Is(err, qga.ErrBusy):
		return agentBusy
	}
	return agentSilent
}

// run polls until close.
func (a *agentPoller) run() {
	cfg, log := a.d.l.cfg, a.log
	retry := &backoff{min: cfg.AgentRetryMin, max: cfg.AgentRetryMax}
	defer a.shutdown()
	for {
		wait := cfg.AgentPingInterval
		err := a.ping()
		up := a.isUp()
		switch v := pingVerdict(err); {
		case v == agentAnswers && !up:
			log.Info("guest agent connected")
			// Whatever the agent was before (a use may have found it lost), this one starts
			// afresh: no abandoned processes, its version read again.
			a.forgetAbandoned()
			a.forgetVersion()
			a.markUp(true) // for use: the first info round runs before the agent is reported
			a.infoRound()
			a.setUp(true)
			retry.reset()
		case v == agentAnswers:
			a.reap()
		case v == agentSilent && up:
			log.Info("guest agent lost", "err", err)
			a.forgetAbandoned()
			a.forgetVersion()
			a.setUp(false)
			retry.reset()
			wait = retry.next()
		case v == agentSilent:
			wait = retry.next()
			log.Debug("guest agent not answering", "err", err, "retry", wait)
		case v == agentBusy:
			log.Debug("guest agent busy: ping not sent, no verdict", "err", err)
			if !up {
				wait = retry.next()
			}
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
	a.markUp(up)
	a.d.setAgent(up)
}

// markUp records the verdict for use without reporting it.
func (a *agentPoller) markUp(up bool) {
	a.mu.Lock()
	a.up = up
	a.mu.Unlock()
}

// ping dials when needed and pings once (guest-ping); a closed socket is dropped for a redial
// next time. The wait in line is bounded by agentQueueTimeout, the ping by agentPingTimeout
// from when it is sent; the context only backs both up.
func (a *agentPoller) ping() error {
	c, err := a.connection()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentQueueTimeout+agentPingTimeout)
	defer cancel()
	err = c.Ping(ctx)
	if errors.Is(err, qga.ErrDisconnected) {
		a.drop(c)
	}
	return err
}

// connection returns the agent connection, dialling the socket if there is none.
func (a *agentPoller) connection() (*qga.Agent, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != nil {
		return a.conn, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), agentPingTimeout)
	defer cancel()
	c, err := qga.Dial(ctx, a.socket, agentOptions())
	if err != nil {
		return nil, err
	}
	a.conn = c
	return c, nil
}

// drop closes c if it is still the connection.
func (a *agentPoller) drop(c *qga.Agent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn == c {
		c.Close()
		a.conn = nil
	}
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

// guestReset reports the agent lost at once: a reset guest's agent is gone with it, and
// whatever answers next is a new one (its version read again, the old one's processes
// forgotten). Waiting for a ping to go unanswered would miss a reboot that fits between two
// pings. The poller looks again at once.
func (a *agentPoller) guestReset() {
	if a.isUp() {
		a.log.Info("guest agent lost", "reason", "guest reset")
		a.forgetAbandoned()
		a.forgetVersion()
		a.setUp(false)
	}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// use runs f with the connection of an answering agent. It holds no lock while f runs: qga
// puts f's commands in line with everyone else's, one at a time. Errors:
// ErrAgentNotConnected when the agent does not answer (a command sent got no answer in time,
// or the socket closed; the poller then re-checks at once); ErrAgentBusy when a command could
// not even be sent in time because others held the channel; ErrAgentCommand when the agent
// answered with an error. An unanswered command reports the agent lost at once.
func (a *agentPoller) use(ctx context.Context, f func(context.Context, *qga.Agent) error) error {
	a.mu.Lock()
	c, up := a.conn, a.up
	a.mu.Unlock()
	if c == nil || !up {
		return ErrAgentNotConnected
	}
	err := f(ctx, c)
	if _, isAgentErr := errors.AsType[*qga.Error](err); isAgentErr {
		return fmt.Errorf("%w: %w", ErrAgentCommand, err)
	}
	switch {
	case errors.Is(err, qga.ErrBusy):
		return fmt.Errorf("%w: %w", ErrAgentBusy, err)
	case errors.Is(err, qga.ErrTimeout), errors.Is(err, qga.ErrDisconnected):
		// A command sent went unanswered: the agent is lost now (it may be a new one by the
		// next ping: a guest reset or reboot must still show as lost, then connected).
		if a.isUp() {
			a.log.Info("guest agent lost", "err", err)
			a.setUp(false)
		}
		select {
		case a.kick <- struct{}{}:
		default:
		}
		return fmt.Errorf("%w: %w", ErrAgentNotConnected, err)
	}
	return err
}
