package launcher

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/vmlet/vmlet/qemu/accel"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Config configures a Launcher. Only RunDir is required.
type Config struct {
	// RunDir is the launcher's folder (see Paths); created if missing. Keep it short: unix
	// socket paths under it must fit in 107 bytes.
	RunDir string
	// Name, if set, is the only domain name Sync and PrepareMigrationTarget accept.
	Name string
	// GracePeriod is how long a SIGTERM (Run's context ending) lets the guest power off after
	// the ACPI power button before QEMU is told to quit. Zero means DefaultGracePeriod.
	GracePeriod time.Duration
	// Logger receives the launcher's logs; nil discards them.
	Logger *slog.Logger
	// QEMUBinary is the emulator; empty means qemu-system-x86_64 from PATH.
	QEMUBinary string
	// Accel overrides the host accelerator probe (tests); nil means accel.Probe().
	Accel *accel.Decision
	// QMPLogMaxBytes caps logs/qmp.log before rotation (default 4 MiB); QMPLogKeep is the number
	// of rotated files kept (default 3).
	QMPLogMaxBytes int64
	QMPLogKeep     int
	// Agent poller timing: the back-off between connection attempts grows from AgentRetryMin
	// (default 200 ms) to AgentRetryMax (default 5 s); a connected agent is pinged every
	// AgentPingInterval (default 5 s).
	AgentRetryMin, AgentRetryMax, AgentPingInterval time.Duration
}

// DefaultGracePeriod is the SIGTERM grace period when Config.GracePeriod is zero.
const DefaultGracePeriod = 30 * time.Second

// Launcher is the per-VM runtime: it serves the API on its run dir's socket, owns at most one
// QEMU process (the domain) through the qemu driver, and ends when that process ends (or, with
// no domain, when Run's context ends).
type Launcher struct {
	cfg    Config
	paths  Paths
	log    *slog.Logger
	events *eventLog
	qlog   *qmpLog
	qstats qmpStats // QMP latency by command, lost connections (DomainStats.launcher)

	lis      net.Listener
	tapLis   *net.UnixListener // the agent hands tap files over here
	taps     tapPool
	dhcp     dhcpPool // the VM's DHCP services, handed over with the taps
	disks    diskPool // disk image files handed over, by disk id
	srv      *grpc.Server
	serveErr chan error // grpc.Serve's result

	syncMu sync.Mutex // serializes Sync and PrepareMigrationTarget
	mu     sync.Mutex
	dom    *domain       // nil until a domain started
	term   bool          // terminating: no new domain
	domSet chan struct{} // closed when dom is set
}

// api is the gRPC service: the RPC methods live on it, not on Launcher, so that they are not
// part of the package's Go API (use Client).
type api struct {
	pb.UnimplementedLauncherServer
	*Launcher
}

var _ pb.LauncherServer = (*api)(nil)

// New checks cfg and returns a launcher; it has no side effects (Run does everything).
func New(cfg Config) (*Launcher, error) {
	if cfg.RunDir == "" {
		return nil, fmt.Errorf("new launcher: %w: run dir missing", ErrInvalidConfig)
	}
	if cfg.GracePeriod < 0 {
		return nil, fmt.Errorf("new launcher: %w: negative grace period", ErrInvalidConfig)
	}
	if cfg.GracePeriod == 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	cfg.AgentRetryMin = orDefault(cfg.AgentRetryMin, 200*time.Millisecond)
	cfg.AgentRetryMax = orDefault(cfg.AgentRetryMax, 5*time.Second)
	cfg.AgentPingInterval = orDefault(cfg.AgentPingInterval, 5*time.Second)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := Paths{Root: cfg.RunDir}
	if err := p.check(); err != nil {
		return nil, err
	}
	return &Launcher{
		cfg: cfg, paths: p, log: log, events: newEventLog(),
		serveErr: make(chan error, 1), domSet: make(chan struct{}),
	}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Paths returns the run dir layout.
func (l *Launcher) Paths() Paths { return l.paths }

// Run starts the launcher (named steps, see startupSteps), serves until the domain's QEMU
// exits, and cleans up. Ending ctx means SIGTERM: a running domain is shut down gracefully
// within Config.GracePeriod (then quit, then killed); without a domain Run returns at once.
// The Exit says how it went (Exit.Code is the process exit status). A startup failure is a
// *StepError naming the step, with Exit.Code ExitError.
func (l *Launcher) Run(ctx context.Context) (Exit, error) {
	if err := l.startup(); err != nil {
		return Exit{Code: ExitError, Reason: "startup-failed"}, err
	}
	defer l.teardown()
	l.log.Info("launcher ready", "socket", l.paths.ReadySocket())

	select {
	case <-ctx.Done():
		l.log.Info("terminating", "grace", l.cfg.GracePeriod)
		if d := l.terminate(); d != nil {
			_ = d.stop(stopShutdown, l.cfg.GracePeriod) // stop logs a failure; finish reports the end
			return l.finish(d), nil
		}
		return Exit{Code: ExitOK, Reason: "no-domain"}, nil
	case <-l.domSet:
	case err := <-l.serveErr:
		return Exit{Code: ExitError, Reason: "api-failed"}, fmt.Errorf("serve api: %w", err)
	}
	d := l.domain()
	select {
	case <-d.exited:
	case <-ctx.Done():
		l.log.Info("terminating", "grace", l.cfg.GracePeriod)
		l.terminate()
		_ = d.stop(stopShutdown, l.cfg.GracePeriod) // stop logs a failure; finish reports the end
	}
	return l.finish(d), nil
}

// domain returns the current domain or nil.
func (l *Launcher) domain() *domain {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dom
}

// terminate refuses new domains from now on and returns the current one (or nil).
func (l *Launcher) terminate() *domain {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.term = true
	return l.dom
}

// finish waits for the domain's end, reports it and computes the exit.
func (l *Launcher) finish(d *domain) Exit {
	<-d.exited
	l.terminate()
	ex := d.exit()
	l.log.Info("domain ended", "reason", ex.Reason, "code", ex.Code, "detail", ex.Detail)
	if err := writeEnd(l.paths.EndRecord(), ex); err != nil {
		l.log.Warn("record the domain's end", "err", err)
	}
	return ex
}

// writeEnd records ex at path (Paths.EndRecord), whole or not at all (a temporary file
// renamed).
func writeEnd(path string, ex Exit) error {
	b, err := json.Marshal(struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
		Detail string `json:"detail"`
	}{ex.Code, ex.Reason, ex.Detail})
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
