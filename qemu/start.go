package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"time"

	"github.com/vmlet/vmlet/internal/revert"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// StartOptions are the host-side settings of Start; the zero value works.
type StartOptions struct {
	// Binary is the emulator; empty means DefaultBinary from PATH.
	Binary string
	// Accel is the host's accelerator decision; nil means accel.Probe().
	Accel *accel.Decision
	// DefaultMachine is the versioned q35 machine for Migratable specs without one; empty means
	// ask the emulator (DefaultQ35Machine) when needed.
	DefaultMachine string
	// QMPSocket is where the QMP monitor socket is bound; empty means a private temporary
	// folder. The socket (and that folder) are removed once QEMU exited.
	QMPSocket string
	// Logger receives step and lifecycle logs; nil discards them.
	Logger *slog.Logger
	// Stderr receives a copy of QEMU's standard error (a bounded tail is always kept for
	// ExitInfo and StepError).
	Stderr io.Writer
	// QMP configures the monitor client (default and per-command timeouts, recording tap).
	QMP qmp.Options
	// Sandbox is QEMU's own seccomp filter; the zero value denies every optional group.
	Sandbox Sandbox
}

// stderrTail is how much of QEMU's standard error is kept.
const stderrTail = 16 << 10

// starter is the state Start's steps share.
type starter struct {
	spec  *Spec
	opts  StartOptions
	env   Env
	files *childFiles
	qmp   string // QMP socket path
	vm    *VM
	r     *revert.Reverter
}

// startStep is one named step of Start; it registers its own undo on s.r.
type startStep struct {
	name string
	run  func(*starter, context.Context) error
}

// startSteps is Start's sequence (firecracker-go-sdk handlers style): the failing step is
// logged and reported by name, and every completed step is undone.
var startSteps = []startStep{
	{"validate", (*starter).validate},
	{"prepare-files", (*starter).prepareFiles},
	{"exec-qemu", (*starter).execQEMU},
	{"connect-qmp", (*starter).connectQMP},
	{"serve-vnc", (*starter).serveVNC},
	{"attach-devices", (*starter).attachDevices},
	{"refresh-boot-order", (*starter).refreshBootOrder},
	{"balloon-stats", (*starter).balloonStats},
	{"cont", (*starter).cont},
}

// Start starts QEMU for spec and returns once the devices are attached and (unless the spec
// is StartPaused or Incoming) the guest runs. ctx bounds only the start: the VM lives until
// QEMU exits (see Exited, Shutdown, Kill). On error everything Start did is undone (QEMU
// killed and reaped, sockets removed) and the error is a *StepError naming the step.
func Start(ctx context.Context, spec *Spec, opts StartOptions) (*VM, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &starter{spec: cloneSpec(spec), opts: opts, r: revert.New()}
	s.vm = &VM{log: log.With("vm", spec.Name), eventsDone: make(chan struct{}), exited: make(chan struct{})}
	defer s.r.Fail()
	for _, st := range startSteps {
		t0 := time.Now()
		if err := st.run(s, ctx); err != nil {
			se := &StepError{Step: st.name, Err: err}
			if s.vm.proc != nil {
				s.r.Fail() // kill and reap first: the stderr tail is complete afterwards
				se.Stderr = s.vm.stderr.String()
			}
			s.vm.log.Error("start failed", "step", st.name, "err", err)
			return nil, se
		}
		s.vm.log.Debug("start step done", "step", st.name, "took", time.Since(t0))
	}
	s.r.Success()
	go s.vm.supervise()
	return s.vm, nil
}

func (s *starter) validate(ctx context.Context) error {
	if err := s.spec.Validate(); err != nil {
		return err
	}
	d := s.opts.Accel
	if d == nil {
		p := accel.Probe()
		d = &p
	}
	s.env.Accel = *d
	s.env.DefaultMachine = s.opts.DefaultMachine
	s.env.Sandbox = &s.opts.Sandbox
	if s.spec.Migratable && s.spec.Machine == "" && s.env.DefaultMachine == "" {
		m, err := DefaultQ35Machine(ctx, s.opts.Binary)
		if err != nil {
			return err
		}
		s.env.DefaultMachine = m
	}
	r, err := Resolve(s.spec, s.env)
	if err != nil {
		return err
	}
	s.vm.resolved = r
	if err := checkSpecFiles(s.spec); err != nil {
		return err
	}
	s.env.BlockDevices, err = blockDevices(s.spec)
	return err
}

func (s *starter) prepareFiles(context.Context) error {
	qmpSock := s.opts.QMPSocket
	var created []string
	if qmpSock == "" {
		dir, err := privateDir()
		if err != nil {
			return err
		}
		created = append(created, dir)
		qmpSock = qmpSocketIn(dir)
	}
	s.qmp = qmpSock
	files, err := openChildFiles(s.spec, qmpSock)
	if err != nil {
		removeAll(s.vm.log, created)
		return err
	}
	s.files = files
	s.env.FDs = files.fds
	s.vm.files = append(created, files.created...)
	s.r.Add(func() { files.closeFiles(); removeAll(s.vm.log, s.vm.files) })
	return nil
}

func (s *starter) execQEMU(context.Context) error {
	args, err := BuildArgv(s.spec, s.env)
	if err != nil {
		return err
	}
	bin := s.opts.Binary
	if bin == "" {
		if bin, err = exec.LookPath(DefaultBinary); err != nil {
			return fmt.Errorf("find emulator: %w", err)
		}
	}
	s.vm.argv = append([]string{bin}, args...)
	s.vm.stderr = newTailBuffer(stderrTail, s.opts.Stderr)
	s.vm.log.Info("exec qemu", "argv", s.vm.argv)
	p, err := startProcess(bin, args, s.files.files, s.vm.stderr, s.vm.stderr)
	if err != nil {
		return err
	}
	// Close our copies now: if QEMU dies, its sockets die with it and QMP sees EOF at once.
	s.files.closeFiles()
	s.vm.proc = p
	s.r.Add(func() {
		_ = p.signal(killSignal) // rollback is best effort; p.done tells when QEMU is gone
		<-p.done
	})
	return nil
}

func (s *starter) connectQMP(ctx context.Context) error {
	// QEMU dying during the handshake must end Dial at once, not at ctx's deadline.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-s.vm.proc.done:
			cancel(ErrExited)
		case <-ctx.Done():
		}
	}()
	mon, err := qmp.Dial(ctx, s.qmp, s.opts.QMP)
	if err != nil {
		if errors.Is(context.Cause(ctx), ErrExited) || s.exitedAfter(err) {
			return fmt.Errorf("connect qmp: %w: %w", ErrExited, err)
		}
		return fmt.Errorf("connect qmp: %w", err)
	}
	s.vm.mon = mon
	s.vm.version = greetingVersion(mon)
	events, unsub := mon.Subscribe(func(e qmp.Event) bool { return e.Name == "SHUTDOWN" || e.Name == "GUEST_PANICKED" })
	go s.vm.watchShutdown(events, unsub)
	if s.spec.CPU.cpuHotplug() {
		cpus, _ := mon.Subscribe(func(e qmp.Event) bool { _, ok := CPUUnplugged(e); return ok })
		go s.vm.watchCPUUnplugs(cpus) // ends when the monitor closes the channel
	}
	s.r.Add(func() { mon.Close() })
	return nil
}

// exitedAfter reports whether a lost QMP connection was QEMU exiting: the socket closes a
// moment before the process is reaped, so wait (bounded) for the reaping.
func (s *starter) exitedAfter(err error) bool {
	if !errors.Is(err, qmp.ErrDisconnected) {
		return false
	}
	t := time.NewTimer(reapTimeout)
	defer t.Stop()
	select {
	case <-s.vm.proc.done:
		return true
	case <-t.C:
		return false
	}
}

// reapTimeout bounds the wait for a process whose QMP socket just closed.
const reapTimeout = 5 * time.Second

func (s *starter) attachDevices(ctx context.Context) error {
	l, err := s.spec.layout()
	if err != nil {
		return err
	}
	s.vm.spec = *s.spec
	s.vm.rootPorts = l.rootPorts
	s.vm.recordStartResources()
	for _, d := range s.spec.Disks {
		d = d.withDefaults()
		d.Port = l.slot[d.ID]
		if d.Bus == BusSATA { // already on the command line
			s.vm.recordDisk(d)
			continue
		}
		if err := s.vm.attachDisk(ctx, d); err != nil {
			return err
		}
	}
	for _, n := range s.spec.NICs {
		n.Port = l.slot[n.ID]
		if err := s.vm.attachNIC(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// refreshBootOrder resets the machine (still in prelaunch) when a device attached over QMP
// has a bootindex. QEMU writes the firmware's boot order (fw_cfg "bootorder") at machine
// reset, and its first reset happened before QMP was up: without this one, SeaBIOS would see
// the command line's devices only. Migration targets skip it (their guest state comes with
// the migration; the next guest reset reads the same indexes, the devices being the same).
//
// QMP: system_reset, event RESET.
func (s *starter) refreshBootOrder(ctx context.Context) error {
	if s.spec.Incoming || !s.spec.qmpBootIndex() {
		return nil
	}
	reset, unsub := s.vm.mon.Subscribe(func(e qmp.Event) bool { return e.Name == "RESET" })
	defer unsub()
	if err := s.vm.Reset(ctx); err != nil {
		return err
	}
	select {
	case _, ok := <-reset:
		if !ok {
			return fmt.Errorf("wait for RESET: %w", ErrExited)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for RESET: %w", ctx.Err())
	}
}

// balloonStats turns on the balloon's guest statistics polling. It runs on migration targets
// too (before migrate-incoming): the polling interval is not migrated, and the device's
// post-load restarts the timer with the target's own value; WaitIncoming sets it once more
// after the migration completed.
func (s *starter) balloonStats(ctx context.Context) error {
	return s.vm.setBalloonStatsPeriod(ctx)
}

func (s *starter) cont(ctx context.Context) error {
	if s.spec.StartPaused || s.spec.Incoming {
		return nil
	}
	return s.vm.Resume(ctx)
}

// cloneSpec copies spec deeply enough that the caller's later changes do not reach the VM.
func cloneSpec(spec *Spec) *Spec {
	c := *spec
	c.Disks = slices.Clone(spec.Disks) // Files stay shared: the caller owns them
	c.NICs = slices.Clone(spec.NICs)
	c.Panic = slices.Clone(spec.Panic)
	if spec.Serial != nil {
		s := *spec.Serial
		c.Serial = &s
	}
	if spec.Agent != nil {
		a := *spec.Agent
		c.Agent = &a
	}
	if spec.Balloon != nil {
		b := *spec.Balloon
		c.Balloon = &b
	}
	if spec.MemoryHotplug != nil {
		m := *spec.MemoryHotplug
		c.MemoryHotplug = &m
	}
	if spec.Graphics != nil {
		g := *spec.Graphics
		c.Graphics = &g
	}
	return &c
}
