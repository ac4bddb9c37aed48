package controllers

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/network/dhcp"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// grpcLauncher adapts the launcher's typed client (qemu/launcher.Client) to Launcher.
type grpcLauncher struct {
	c     *launcher.Client
	paths launcher.Paths // of the launcher's run folder: its tap hand-over socket
	// hostPID maps the PIDs the launcher reports (in its own PID namespace) to the agent's;
	// nil: they are the same namespace (the process runtime).
	hostPID func(pid int) (int, error)
}

var (
	_ Launcher    = (*grpcLauncher)(nil)
	_ DHCPHost    = (*grpcLauncher)(nil)
	_ StatsReader = (*grpcLauncher)(nil)
)

// Deadlines of the calls to a launcher (incus' commandTimeouts): no reconcile waits longer on a
// launcher that stopped answering. Sync includes QEMU's start (≈0.1 s, seconds on a loaded
// TCG host); hot-plugging waits for QEMU, unplugging for the guest (bounded by unplugTimeout
// too).
const (
	callDomain          = 5 * time.Second
	callSync            = time.Minute
	callPause           = 10 * time.Second
	callUnpause         = 10 * time.Second
	callAttachedNICs    = 5 * time.Second
	callAttachedDisks   = 5 * time.Second
	callHotplugNIC      = 30 * time.Second
	callHotplugDisk     = 30 * time.Second
	callUnplugNIC       = unplugTimeout
	callUnplugDisk      = unplugTimeout
	callGuestInterfaces = guestInfoTimeout
	callSetCPUs         = 30 * time.Second // plugs wait for QEMU; unplugs are reported pending
	callSetMemory       = 10 * time.Second // returns at once; the guest plugs afterwards
)

// bound gives one launcher call its deadline.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// DialLauncher connects to a launcher's ready socket.
func DialLauncher(ctx context.Context, socket string, check launcher.PeerCheck) (Launcher, error) {
	metrics := grpc.WithChainUnaryInterceptor(vmimetrics.LauncherRPCInterceptor)
	var c *launcher.Client
	var err error
	if check != nil {
		c, err = launcher.DialChecked(ctx, socket, check, metrics)
	} else {
		c, err = launcher.Dial(ctx, socket, metrics)
	}
	if err != nil {
		return nil, fmt.Errorf("dial launcher %s: %w", socket, err)
	}
	return &grpcLauncher{c: c, paths: launcher.Paths{Root: filepath.Dir(socket)}}, nil
}

// DefaultLauncherArgs is vmlet-launcher's command line for a run folder. A zero grace period
// (terminationGracePeriodSeconds: 0) means "stop at once"; the launcher reads 0 as its default,
// so it gets the shortest positive one.
func DefaultLauncherArgs(runDir, name string, grace time.Duration) []string {
	if grace <= 0 {
		grace = time.Millisecond
	}
	return []string{"--run-dir", runDir, "--name", name, "--grace-period", grace.String()}
}

// Sync hands the NICs' taps over first when the launcher has no domain yet (it is about to
// start QEMU with them; a running domain keeps its taps and Sync is a no-op then).
func (g *grpcLauncher) Sync(ctx context.Context, spec *qemu.Spec, netns map[string]string) error {
	ctx, cancel := bound(ctx, callSync)
	defer cancel()
	d, err := g.c.GetDomain(ctx)
	if err != nil {
		return fmt.Errorf("sync domain: %w", err)
	}
	if s := d.GetState(); s == pb.State_STATE_NO_DOMAIN || s == pb.State_STATE_SHUTOFF || s == pb.State_STATE_CRASHED {
		for _, n := range spec.NICs {
			if n.TapName == "" {
				continue
			}
			if err := g.handOverTap(ctx, n, netns[n.ID]); err != nil {
				return fmt.Errorf("sync domain: %w", err)
			}
		}
	}
	_, err = g.c.Sync(ctx, launcher.SpecToProto(spec, netns))
	return err
}

// handOverTap opens n's tap queues (and a counters file) in netns as root and hands them to
// the launcher, which may lack the privileges to open /dev/net/tun or enter netns (KubeVirt's
// virt-handler likewise makes the tap for the unprivileged virt-launcher).
func (g *grpcLauncher) handOverTap(ctx context.Context, n qemu.NIC, netns string) error {
	files, err := network.OpenTap(netns, n.TapName, max(n.Queues, 1))
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	counters, err := network.OpenNetDev(netns)
	if err != nil {
		return err
	}
	defer counters.Close()
	return launcher.HandOverTap(ctx, g.paths.TapSocket(), n.TapName, files, counters)
}

func (g *grpcLauncher) Pause(ctx context.Context) (DomainState, error) {
	ctx, cancel := bound(ctx, callPause)
	defer cancel()
	d, err := g.c.Pause(ctx)
	if err != nil {
		return DomainState{}, err
	}
	return g.domainState(d)
}

func (g *grpcLauncher) Unpause(ctx context.Context) (DomainState, error) {
	ctx, cancel := bound(ctx, callUnpause)
	defer cancel()
	d, err := g.c.Unpause(ctx)
	if err != nil {
		return DomainState{}, err
	}
	return g.domainState(d)
}

var domainPhases = map[pb.State]DomainPhase{
	pb.State_STATE_NO_DOMAIN:     DomainNone,
	pb.State_STATE_STARTING:      DomainStarting,
	pb.State_STATE_RUNNING:       DomainRunning,
	pb.State_STATE_PAUSED:        DomainPaused,
	pb.State_STATE_SHUTTING_DOWN: DomainShuttingDown,
	pb.State_STATE_SHUTOFF:       DomainShutoff,
	pb.State_STATE_CRASHED:       DomainCrashed,
	pb.State_STATE_MIGRATING_IN:  DomainMigratingIn,
}

func (g *grpcLauncher) Domain(ctx context.Context) (DomainState, error) {
	ctx, cancel := bound(ctx, callDomain)
	defer cancel()
	d, err := g.c.GetDomain(ctx)
	if err != nil {
		return DomainState{}, err
	}
	return g.domainState(d)
}

// mapPIDs makes the launcher's reports carry PIDs of the agent's namespace (see PIDMapper).
func (g *grpcLauncher) mapPIDs(f func(pid int) (int, error)) { g.hostPID = f }

// domainState is domainState with QEMU's PID in the agent's PID namespace: 0 when it cannot
// be mapped (QEMU just ended), never a PID of the launcher's namespace, which names another
// process, or none, in the agent's.
func (g *grpcLauncher) domainState(d *pb.Domain) (DomainState, error) {
	s, err := domainState(d)
	if err != nil || g.hostPID == nil || s.Pid == 0 {
		return s, err
	}
	if s.Pid, err = g.hostPID(s.Pid); err != nil {
		s.Pid = 0
	}
	return s, nil
}

// domainState converts the launcher's domain message.
func domainState(d *pb.Domain) (DomainState, error) {
	phase, ok := domainPhases[d.GetState()]
	if !ok {
		return DomainState{}, fmt.Errorf("get domain: unknown state %v", d.GetState())
	}
	return DomainState{
		State:          phase,
		Reason:         d.GetReason(),
		Accel:          d.GetAccel(),
		AccelReason:    d.GetAccelReason(),
		QEMUVersion:    d.GetQemuVersion(),
		Pid:            int(d.GetPid()),
		AgentConnected: d.GetAgentConnected(),
		ServesDHCP:     d.GetServesDhcp(),
		DHCPServed:     d.GetDhcpInterfaces(),
		Leases:         leases(d.GetLeases()),
		Guest:          guestInfo(d.GetGuestInfo()),
		CPU:            cpuState(d.GetCpu()),
		BootSockets:    int(d.GetLiveSpec().GetCpu().GetSockets()),
		Memory:         memoryState(d.GetMemory()),

		MigrationRefused: d.GetMigrationRefused(),
		ExitDetail:       d.GetExitDetail(),
	}, nil
}

// guestInfo converts the launcher's polled guest info (nil: none yet, or an older launcher).
func guestInfo(g *pb.GuestInfoResponse) *GuestInfo {
	if g == nil {
		return nil
	}
	o := g.GetOs()
	return &GuestInfo{
		OS: GuestOS{ID: o.GetId(), Name: o.GetName(), PrettyName: o.GetPrettyName(), Version: o.GetVersion(),
			VersionID: o.GetVersionId(), KernelRelease: o.GetKernelRelease(), KernelVersion: o.GetKernelVersion(), Machine: o.GetMachine()},
		Interfaces: guestInterfaces(g.GetInterfaces()),
	}
}

func cpuState(c *pb.CPUStatus) *CPUState {
	if c == nil {
		return nil
	}
	return &CPUState{Sockets: int(c.GetSockets()), Cores: int(c.GetCores()), Threads: int(c.GetThreads()),
		MaxSockets: int(c.GetMaxSockets()), UnplugPending: int(c.GetUnplugPending())}
}

func memoryState(m *pb.MemoryStatus) *MemoryState {
	if m == nil {
		return nil
	}
	return &MemoryState{BootBytes: m.GetBootBytes(), PluggedBytes: m.GetPluggedBytes(), RequestedBytes: m.GetRequestedBytes(),
		MaxBytes: m.GetMaxBytes(), BlockBytes: m.GetBlockBytes()}
}

// leases converts the launcher's leases; malformed ones are skipped.
func leases(ls []*pb.Lease) []network.Lease {
	var out []network.Lease
	for _, l := range ls {
		addr, err := netip.ParsePrefix(l.GetAddress())
		if err != nil {
			continue
		}
		mac, _ := net.ParseMAC(l.GetMac())
		out = append(out, network.Lease{
			Interface: l.GetInterface(), MAC: mac, Addr: addr, Hostname: l.GetHostname(),
			Acked: time.Unix(0, l.GetAckedUnixNano()), Expires: time.Unix(0, l.GetExpiresUnixNano()),
		})
	}
	return out
}

func (g *grpcLauncher) ServeDHCP(ctx context.Context, plan network.LeasePlan, socks *dhcp.DHCPSockets) error {
	return launcher.HandOverDHCP(ctx, g.paths.TapSocket(), plan, socks)
}

func (g *grpcLauncher) StopDHCP(ctx context.Context, name string) error {
	return launcher.StopDHCP(ctx, g.paths.TapSocket(), name)
}

func (g *grpcLauncher) Watch(ctx context.Context, notify func()) error {
	return g.c.WatchEvents(ctx, 0, func(*pb.Event) error { notify(); return nil })
}

// VCPUThreads reads the vCPU thread ids from the launcher's DomainStats (QMP query-cpus-fast).
func (g *grpcLauncher) VCPUThreads(ctx context.Context) ([]int, error) {
	st, err := g.c.DomainStats(ctx)
	if err != nil {
		return nil, fmt.Errorf("vcpu threads: %w", err)
	}
	tids := make([]int, 0, len(st.GetVcpus()))
	for _, v := range st.GetVcpus() {
		tids = append(tids, int(v.GetThreadId()))
	}
	return tids, nil
}

func (g *grpcLauncher) Close() error { return g.c.Close() }

// StatsReader is a Launcher that reports the domain's statistics and migration progress (the
// node agent's metrics, package vmimetrics).
type StatsReader interface {
	// DomainStats reads vCPU, memory, block, network and guest file system counters.
	DomainStats(ctx context.Context) (*pb.DomainStatsResponse, error)
	// MigrationProgress reads query-migrate as the launcher reports it.
	MigrationProgress(ctx context.Context) (*pb.MigrationStatus, error)
}

func (g *grpcLauncher) DomainStats(ctx context.Context) (*pb.DomainStatsResponse, error) {
	return g.c.DomainStats(ctx)
}

func (g *grpcLauncher) MigrationProgress(ctx context.Context) (*pb.MigrationStatus, error) {
	return g.c.GetMigrationStatus(ctx)
}
