package launcher

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
)

// Guest info polling intervals, KubeVirt's (pkg/virt-launcher/virtwrap/agent-poller): the OS,
// host name and interfaces every 10 s (its apiCallTick, first round at once), guest-info
// (agent version, supported commands) every 300 s (qemuAgentVersionInterval's default).
// KubeVirt's users (10 s) and file systems (300 s) are not polled: they are not in a VMI's
// status, and GuestInfo answers them live.
const (
	agentInfoInterval    = 10 * time.Second
	agentVersionInterval = 300 * time.Second
	// agentInfoTimeout bounds one round (three short commands, each with its own deadline).
	agentInfoTimeout = 20 * time.Second
)

// pollInfo keeps Domain.guest_info fresh: a round every agentInfoInterval while the agent
// answers, and at once after a NIC hotplug or unplug; nothing while the agent does not answer. The first round after the agent connects is the liveness
// poller's (infoRound before it reports the agent connected), so that a launcher reporting a
// connected agent has guest_info, and the node agent never asks the agent itself.
func (a *agentPoller) pollInfo() {
	t := time.NewTicker(agentInfoInterval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		case <-a.infoKick:
		}
		if a.isUp() {
			a.infoRound()
		}
	}
}

// kickInfo asks pollInfo for a round now (a NIC was plugged or unplugged).
func (a *agentPoller) kickInfo() {
	select {
	case a.infoKick <- struct{}{}:
	default:
	}
}

// infoRound asks the agent for its OS, host name and interfaces (guest-info first when the
// last one is agentVersionInterval old, or was asked of another connection). An answer that
// differs from the last one is stored and emits an AgentEvent with guest_info_changed, which
// is how the node agent learns of it. A failed round changes nothing (the liveness poller
// judges the agent).
func (a *agentPoller) infoRound() {
	a.infoMu.Lock()
	defer a.infoMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), agentInfoTimeout)
	defer cancel()
	out := &pb.GuestInfoResponse{}
	err := a.use(ctx, func(ctx context.Context, g *qga.Agent) error {
		if a.versionRead.IsZero() || time.Since(a.versionRead) >= agentVersionInterval {
			v, err := g.Info(ctx)
			if err != nil {
				return err
			}
			a.version, a.versionRead = v, time.Now()
		}
		out.AgentVersion = a.version.Version
		return guestSysInfo(ctx, g, a.version, out)
	})
	if err != nil {
		a.log.Debug("guest info poll failed", "err", err)
		return
	}
	a.d.setGuestInfo(out)
}

// forgetVersion makes the next round ask guest-info again (the agent went away: the next one
// may be another version).
func (a *agentPoller) forgetVersion() {
	a.infoMu.Lock()
	defer a.infoMu.Unlock()
	a.versionRead = time.Time{}
}

// setGuestInfo stores the guest agent's latest answer and emits an agent event when it
// changed.
func (d *domain) setGuestInfo(info *pb.GuestInfoResponse) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if proto.Equal(d.guestInfo, info) {
		return
	}
	d.guestInfo = info
	up := d.agentUp
	d.l.events.emit(func(e *pb.Event) {
		e.Kind = &pb.Event_Agent{Agent: &pb.AgentEvent{Connected: up, GuestInfoChanged: true}}
	})
}
