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

// pollInfo keeps Domain.guest_info: a round at once when the agent connects (the liveness
// poller kicks it), then every agentInfoInterval while it answers; nothing while it does not.
// A round whose answer differs from the last one stores it and emits an AgentEvent with
// guest_info_changed, which is how the node agent learns of it (no polling on its side).
func (a *agentPoller) pollInfo() {
	var (
		version     qga.Info
		versionRead time.Time
	)
	t := time.NewTimer(agentInfoInterval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-a.infoKick:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		if !a.isUp() {
			versionRead = time.Time{} // a reconnected agent may be another version
			continue                  // the next connect kicks
		}
		ctx, cancel := context.WithTimeout(context.Background(), agentInfoTimeout)
		out := &pb.GuestInfoResponse{}
		err := a.use(ctx, func(ctx context.Context, g *qga.Agent) error {
			if versionRead.IsZero() || time.Since(versionRead) >= agentVersionInterval {
				v, err := g.Info(ctx)
				if err != nil {
					return err
				}
				version, versionRead = v, time.Now()
			}
			out.AgentVersion = version.Version
			return guestSysInfo(ctx, g, version, out)
		})
		cancel()
		if err != nil {
			a.log.Debug("guest info poll failed", "err", err) // the liveness poller judges the agent
		} else {
			a.d.setGuestInfo(out)
		}
		t.Reset(agentInfoInterval)
	}
}

// kickInfo asks pollInfo for a round now.
func (a *agentPoller) kickInfo() {
	select {
	case a.infoKick <- struct{}{}:
	default:
	}
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
