package launcher

import (
	"context"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// refreshTimeout bounds the query-status behind every state refresh.
const refreshTimeout = 5 * time.Second

// domain is the one VM a launcher runs: the driver's VM plus what the launcher tracks about
// it (state from QMP events, agent, migration, the launcher's own stop intent).
type domain struct {
	l        *Launcher
	vm       *qemu.VM
	spec     *pb.DomainSpec // as synced, for Sync's idempotence
	taps     map[string]tapRef
	info     qemu.Info
	started  time.Time
	incoming bool // started as a migration target
	stderr   *os.File

	refreshMu sync.Mutex // one query-status + state update at a time, in order
	claims    claims     // the STOP/RESUME events our own stop/cont caused (no refresh for them)
	mu        sync.Mutex // guards the fields below; events are emitted under it
	state     pb.State
	reason    string
	agentUp   bool
	guestInfo *pb.GuestInfoResponse // the agent poller's last answer (Domain.guest_info); nil before one
	migRole   string                // roleSource once Migrate ran; roleTarget for an incoming domain
	mig       *pb.MigrationStatus   // last status seen (MIGRATION events); nil before any

	stopMu sync.Mutex
	intent stopIntent // set once, by the first stop

	agent    *agentPoller // nil without a guest agent channel
	closers  []func()     // end the agent poller and the debug proxy (under mu)
	watchers sync.WaitGroup
	exited   chan struct{} // closed after QEMU exited and the final event was emitted
	exitVal  Exit          // set (under mu) with the final state, before exited closes
}

// mapStatus maps QEMU's run state (query-status) to the API's state and reason. Pure.
func mapStatus(status string) (pb.State, string) {
	switch status {
	case "running":
		return pb.State_STATE_RUNNING, ""
	case "paused":
		return pb.State_STATE_PAUSED, "user"
	case "prelaunch":
		return pb.State_STATE_PAUSED, "start-paused"
	case "inmigrate":
		return pb.State_STATE_MIGRATING_IN, "migration"
	case "finish-migrate":
		return pb.State_STATE_PAUSED, "migration"
	case "postmigrate":
		return pb.State_STATE_PAUSED, "postmigrate"
	case "io-error":
		return pb.State_STATE_PAUSED, "io-error"
	case "watchdog":
		return pb.State_STATE_PAUSED, "watchdog"
	case "suspended":
		return pb.State_STATE_PAUSED, "suspended"
	case "shutdown":
		return pb.State_STATE_SHUTTING_DOWN, ""
	case "guest-panicked":
		return pb.State_STATE_CRASHED, ReasonGuestPanicked
	case "internal-error":
		return pb.State_STATE_CRASHED, "internal-error"
	default: // debug, save-vm, restore-vm, colo: stopped for a reason of QEMU's own
		return pb.State_STATE_PAUSED, status
	}
}

// setState records a state and emits a lifecycle event if it changed.
func (d *domain) setState(state pb.State, reason, trigger string) {
	d.setStateMsg(state, reason, trigger, "")
}

func (d *domain) setStateMsg(state pb.State, reason, trigger, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == state && d.reason == reason {
		return
	}
	d.state, d.reason = state, reason
	d.l.events.lifecycleMsg(state, reason, trigger, msg)
}

// refresh reads QEMU's run state and records it (level-based: events only trigger it, so a
// late or stale event can never set a wrong state). trigger names the cause for the event.
func (d *domain) refresh(trigger string) {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	st, err := d.vm.Status(ctx)
	if err != nil {
		d.l.log.Debug("refresh state", "trigger", trigger, "err", err)
		return
	}
	state, reason := mapStatus(st.Status)
	d.setState(state, reason, trigger)
}

// commanded records the run state a successful QMP stop ("paused") or cont ("running") leaves
// QEMU in, without a query-status round trip, so the reply to Pause/Unpause already agrees
// with GetDomain. It holds refreshMu like refresh: a STOP/RESUME event (from a client of
// qmp-debug.sock, say) that arrives after the command refreshes the state again.
func (d *domain) commanded(status, trigger string) {
	d.refreshMu.Lock()
	defer d.refreshMu.Unlock()
	state, reason := mapStatus(status)
	d.setState(state, reason, trigger)
}

func (d *domain) setAgent(up bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.agentUp == up {
		return
	}
	d.agentUp = up
	d.l.events.agent(up)
}

// setMigrationRole records which side of a migration this domain is.
func (d *domain) setMigrationRole(role string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.migRole = role
}

// setMigration records a migration status (QEMU's) and emits a migration event when it
// changed.
func (d *domain) setMigration(status string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.migRole == roleTarget && status == "completed" {
		// An ordinary domain from now on, whatever its later (outgoing) migrations do; whoever
		// saw the completion first (event or FinalizeMigration).
		d.incoming = false
	}
	if d.mig != nil && d.mig.Status == status {
		return
	}
	d.mig = &pb.MigrationStatus{Role: d.migRole, Status: status}
	d.l.events.migration(d.migRole, status)
}

// migratingIn reports whether d is a migration target whose incoming migration has not
// completed yet: until it has, it can neither be synced nor migrated. A completed target is an
// ordinary domain (it can migrate on).
func (d *domain) migratingIn() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.incoming && (d.mig == nil || d.mig.Status != "completed")
}

// leftForTarget reports whether d's guest went to the target of its outgoing migration: the
// migration completed or switched to post-copy (the source then lacks the pages the target
// dirtied). Such a guest must not run here again.
func (d *domain) leftForTarget() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.migRole != roleSource || d.mig == nil {
		return false, ""
	}
	st := d.mig.Status
	return st == "completed" || strings.HasPrefix(st, "postcopy"), st
}

func (d *domain) migrationRole() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.migRole
}

func (d *domain) deviceEvent(kind pb.DeviceEvent_Kind, action pb.DeviceEvent_Action, id string) {
	d.mu.Lock()
	d.l.events.device(kind, action, id)
	d.mu.Unlock()
	if kind == pb.DeviceEvent_KIND_NIC && d.agent != nil {
		d.agent.kickInfo() // the guest's interfaces changed: do not wait for the next round
	}
}

// snapshot is GetDomain's answer. State and LastEventSeq are read together: watching events
// after LastEventSeq yields exactly the later changes.
func (d *domain) snapshot() *pb.Domain {
	out := &pb.Domain{
		Name:            d.info.Name,
		Accel:           string(d.info.Accel),
		AccelReason:     d.info.AccelReason,
		QemuVersion:     d.info.Version,
		Pid:             int32(d.info.PID),
		Machine:         d.info.Machine,
		CpuModel:        d.info.CPUModel,
		StartedUnixNano: d.started.UnixNano(),
	}
	for _, disk := range d.vm.Disks() {
		out.Disks = append(out.Disks, disk.ID)
	}
	for _, n := range d.vm.NICs() {
		out.Nics = append(out.Nics, n.ID)
	}
	out.LiveSpec = d.liveSpec()
	out.Cpu, out.Memory = d.resources() // first: it notes unplugs that completed unheard
	if err := d.vm.MigrationSafe(); err != nil {
		out.MigrationRefused = err.Error()
	}
	out.DhcpInterfaces, out.Leases = d.l.dhcp.snapshot()
	out.ServesDhcp = true
	d.mu.Lock()
	out.State, out.Reason, out.AgentConnected = d.state, d.reason, d.agentUp
	out.ExitDetail = d.exitVal.Detail // a SHUTOFF or CRASHED state says how
	if d.guestInfo != nil {
		out.GuestInfo = proto.CloneOf(d.guestInfo)
	}
	if d.mig != nil {
		out.Migration = &pb.MigrationStatus{Role: d.mig.Role, Status: d.mig.Status}
	}
	out.LastEventSeq = d.l.events.last()
	d.mu.Unlock()
	return out
}

// liveSpec is the running domain as a wire spec (see qemu.VM.MigrationSpec), with the NICs'
// taps named the way they were given.
func (d *domain) liveSpec() *pb.DomainSpec {
	s := d.vm.MigrationSpec()
	ns := NetNS{}
	d.mu.Lock()
	for i, n := range s.NICs {
		if t, ok := d.taps[n.ID]; ok {
			s.NICs[i].TapName, s.NICs[i].Queues = t.Name, t.Queues
			ns[n.ID] = t.NetNS
		}
	}
	d.mu.Unlock()
	return SpecToProto(&s, ns)
}

func (d *domain) addTap(id string, t tapRef) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.taps[id] = t
}

func (d *domain) dropTap(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.taps, id)
}

func (d *domain) tapList() map[string]tapRef {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]tapRef, len(d.taps))
	for k, v := range d.taps {
		out[k] = v
	}
	return out
}

// exit is the launcher's Exit once QEMU is gone (valid after exited is closed).
func (d *domain) exit() Exit { return d.exitVal }

// running reports whether QEMU still runs.
func (d *domain) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// addCloser registers a function that stops a watcher once QEMU exited.
func (d *domain) addCloser(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closers = append(d.closers, f)
}

// closeAll runs the closers (newest first), once.
func (d *domain) closeAll() {
	d.mu.Lock()
	cs := d.closers
	d.closers = nil
	d.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}
