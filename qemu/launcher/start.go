package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/vmlet/vmlet/internal/revert"
	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// startTimeout bounds a domain start (QEMU exec, QMP handshake, cold plug, cont).
const startTimeout = 2 * time.Minute

// starter is the state shared by the steps that start a domain.
type starter struct {
	l         *Launcher
	ctx       context.Context
	wire      *pb.DomainSpec
	incoming  bool
	spec      *qemu.Spec
	netns     NetNS
	tapFiles  []*os.File
	diskFiles []*os.File
	d         *domain
}

// startDomain starts QEMU for wire (as an incoming migration target if incoming) as a named
// step list; the failing step is reported by name and everything done is undone. On success
// the domain is published (GetDomain, Run's supervision).
func (l *Launcher) startDomain(ctx context.Context, wire *pb.DomainSpec, incoming bool) (*domain, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	s := &starter{l: l, ctx: ctx, wire: wire, incoming: incoming}
	err := runSteps(l, "start domain", []step{
		{"check-spec", s.checkSpec},
		{"open-taps", s.openTaps},
		{"take-disk-files", s.takeDiskFiles},
		{"start-qemu", s.startQEMU},
		{"watch-events", s.watchEvents},
		{"serve-qmp-debug", s.serveDebug},
		{"poll-agent", s.pollAgent},
		{"publish", s.publish},
	})
	// QEMU holds its own copies now (or nothing was started).
	closeFiles(s.tapFiles)
	closeFiles(s.diskFiles)
	if err != nil {
		if s.d != nil {
			l.events.lifecycle(pb.State_STATE_SHUTOFF, "start-failed", "")
		}
		return nil, err
	}
	return s.d, nil
}

func (s *starter) checkSpec(*revert.Reverter) error {
	l := s.l
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	if term {
		return ErrTerminating
	}
	if l.cfg.Name != "" && s.wire.GetName() != l.cfg.Name {
		return fmt.Errorf("check spec: %w: name %q, this launcher runs %q", ErrInvalidSpec, s.wire.GetName(), l.cfg.Name)
	}
	spec, ns, err := SpecFromProto(s.wire, l.paths)
	if err != nil {
		return err
	}
	spec.Incoming = s.incoming
	if err := spec.Validate(); err != nil {
		return fmt.Errorf("check spec: %w: %w", ErrInvalidSpec, err)
	}
	s.spec, s.netns = spec, ns
	return nil
}

// openTaps replaces each NIC's tap name by file descriptors the launcher opens (in the
// NIC's network namespace), so that QEMU never needs CAP_NET_ADMIN or /dev/net/tun.
func (s *starter) openTaps(*revert.Reverter) error {
	for i, n := range s.spec.NICs {
		if n.TapName == "" {
			continue
		}
		files, err := s.l.tapFiles(tapRef{Name: n.TapName, NetNS: s.netns[n.ID], Queues: n.Queues})
		if err != nil {
			return fmt.Errorf("nic %s: %w", n.ID, err)
		}
		s.tapFiles = append(s.tapFiles, files...)
		s.spec.NICs[i].TapName, s.spec.NICs[i].TapFDs, s.spec.NICs[i].Queues = "", files, 0
	}
	return nil
}

// takeDiskFiles gives each disk the image files the agent handed over for it (HandOverDisk),
// so that QEMU opens those instead of the disk's path (which may not exist in the launcher's
// container). A disk with none is opened by path.
func (s *starter) takeDiskFiles(*revert.Reverter) error {
	s.diskFiles = s.l.diskFiles(s.spec)
	return nil
}

func (s *starter) startQEMU(r *revert.Reverter) error {
	l := s.l
	stderr, err := qemu.OpenLog(l.paths.QEMULog(), 0o600) // never through a planted symlink
	if err != nil {
		return fmt.Errorf("open qemu log: %w", err)
	}
	d := &domain{
		l: l, spec: cloneSpec(s.wire), taps: map[string]tapRef{}, incoming: s.incoming,
		stderr: stderr, exited: make(chan struct{}),
	}
	if s.incoming {
		d.migRole = roleTarget
	}
	for _, n := range s.wire.GetNics() {
		if n.GetTapName() != "" {
			d.taps[n.GetId()] = tapRef{Name: n.GetTapName(), NetNS: n.GetNetns(), Queues: int(n.GetQueues())}
		}
	}
	s.d = d
	l.events.lifecycle(pb.State_STATE_STARTING, map[bool]string{true: "migration", false: "sync"}[s.incoming], "")
	vm, err := qemu.Start(s.ctx, s.spec, qemu.StartOptions{
		Binary:    l.cfg.QEMUBinary,
		Accel:     l.cfg.Accel,
		QMPSocket: l.paths.QMPSocket(),
		Logger:    l.log,
		Stderr:    stderr,
		QMP:       qmp.Options{Tap: l.qlog.tap, Observe: l.qstats.observe},
	})
	if err != nil {
		stderr.Close()
		return err
	}
	d.vm, d.info, d.started = vm, vm.Info(), time.Now()
	r.Add(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := vm.Kill(ctx); err != nil {
			l.log.Error("kill qemu after a failed start", "err", err)
		}
		stderr.Close()
	})
	return nil
}

// watchEvents subscribes to every QMP event before reading the initial state, so no change
// between the two is missed, and starts the supervisor that reports QEMU's exit.
func (s *starter) watchEvents(r *revert.Reverter) error {
	d := s.d
	events, unsub := d.vm.Monitor().Subscribe(d.claims.note)
	d.refresh("")
	d.watchers.Add(1)
	go func() {
		defer d.watchers.Done()
		sawShutdown := false
		for e := range events { // closed when QEMU's monitor ends, or by unsub
			sawShutdown = sawShutdown || e.Name == "SHUTDOWN"
			d.onEvent(e)
		}
		d.monitorEnded(sawShutdown)
	}()
	r.Add(unsub)
	return nil
}

func (s *starter) serveDebug(r *revert.Reverter) error {
	p, err := newDebugProxy(s.d, s.l.paths.DebugSocket())
	if err != nil {
		return err
	}
	s.d.watchers.Add(1)
	go func() {
		defer s.d.watchers.Done()
		p.serve()
	}()
	s.d.addCloser(p.close)
	r.Add(p.close)
	return nil
}

func (s *starter) pollAgent(r *revert.Reverter) error {
	if s.spec.Agent == nil {
		return nil
	}
	a := newAgentPoller(s.d, s.spec.Agent.Socket)
	s.d.agent = a
	s.d.watchers.Add(2)
	go func() {
		defer s.d.watchers.Done()
		a.run()
	}()
	go func() {
		defer s.d.watchers.Done()
		a.pollInfo()
	}()
	s.d.addCloser(a.close)
	r.Add(a.close)
	return nil
}

func (s *starter) publish(*revert.Reverter) error {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term {
		return ErrTerminating
	}
	l.dom = s.d
	close(l.domSet)
	go s.d.supervise()
	return nil
}

// onEvent turns QMP events into state refreshes and migration events.
func (d *domain) onEvent(e qmp.Event) {
	switch e.Name {
	case "STOP", "RESUME":
		if !d.claims.take(e.Seq) {
			d.refresh(e.Name)
		}
	case "GUEST_PANICKED", "SUSPEND", "WAKEUP":
		d.refresh(e.Name)
	case "RESET":
		d.mu.Lock()
		state := d.state
		d.mu.Unlock()
		d.setState(state, "reset", e.Name)
		if d.agent != nil {
			d.agent.guestReset()
		}
	case "SHUTDOWN":
		var data struct {
			Reason string `json:"reason"`
		}
		_ = json.Unmarshal(e.Data, &data)
		d.setState(pb.State_STATE_SHUTTING_DOWN, data.Reason, e.Name)
	case "DEVICE_DELETED":
		if _, ok := qemu.CPUUnplugged(e); ok {
			d.resourceEvent(resourceCPU)
		}
	case "MEMORY_DEVICE_SIZE_CHANGE":
		if qemu.MemorySizeChanged(e) {
			d.resourceEvent(resourceMemory)
		}
	case "MIGRATION":
		var data struct {
			Status string `json:"status"`
		}
		if json.Unmarshal(e.Data, &data) == nil {
			d.setMigration(data.Status)
		}
	}
}

// monitorEnded counts the end of the event stream as a lost QMP connection when the monitor
// is gone while the domain was meant to run (lostWhileRunning); an unsubscribe is no loss.
func (d *domain) monitorEnded(sawShutdown bool) {
	mon := d.vm.Monitor()
	select {
	case <-mon.Done():
	default:
		return
	}
	d.stopMu.Lock()
	intent := d.intent
	d.stopMu.Unlock()
	if lostWhileRunning(intent, sawShutdown, d.migratingIn()) {
		d.l.qstats.lost()
		d.l.log.Warn("qmp connection lost while the domain was meant to run", "err", mon.Err())
	}
}

// supervise waits for QEMU's exit, stops the watchers and emits the final event.
func (d *domain) supervise() {
	<-d.vm.Exited()
	info, _ := d.vm.ExitInfo()
	d.stopMu.Lock()
	intent := d.intent
	d.stopMu.Unlock()
	d.closeAll()
	d.watchers.Wait()
	d.stderr.Close()
	ex := classifyExit(info, intent, d.migratingIn())
	state := pb.State_STATE_SHUTOFF
	if ex.Reason == ReasonCrashed || ex.Reason == ReasonGuestPanicked {
		state = pb.State_STATE_CRASHED
	}
	d.setAgent(false)
	d.mu.Lock()
	d.exitVal = ex
	d.mu.Unlock()
	d.setStateMsg(state, ex.Reason, "", ex.Detail)
	close(d.exited)
}

func cloneSpec(p *pb.DomainSpec) *pb.DomainSpec {
	return proto.Clone(p).(*pb.DomainSpec)
}
