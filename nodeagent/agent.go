package nodeagent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/storage"
)

// Config is a node agent's configuration.
type Config struct {
	NodeName string
	// Runtime runs the launchers (process.Runtime, or the pod runtime in a cluster). When it
	// can report exits (ExitNotifier), the agent hears of them at once.
	Runtime controllers.LauncherRuntime
	// Storage is the node's image cache, volume folders and claims.
	Storage StorageConfig
	// Network, when set, makes vmlet this node's CNI (node bridge, NAT, a netns per launcher).
	// Pods, when set instead, are the pod networks someone else made (the launcher pods').
	// Neither: VMIs with interfaces fail with NoPodNetwork.
	Network *NetworkConfig
	Pods    controllers.PodNetworks
	// TCGCacheMiB bounds each TCG guest's translation cache.
	TCGCacheMiB int
	// Register creates the Node object when it is missing (no kubelet registers this node).
	Register bool
	// OwnsNodeReady makes the agent write the Node's Ready condition and its heartbeat, as a
	// kubelet does: only where vmlet is the node's only agent (local mode). A node with a
	// kubelet keeps its conditions the kubelet's.
	OwnsNodeReady bool
	// NodeAddress is the node's address as other nodes reach it (local mode's fabric: the
	// node's address on it, network.FabricNode.Addr); invalid when unknown (a single node).
	// With it the agent sends and receives live migrations on that address.
	NodeAddress netip.Addr
	// NodeNetns is the network namespace the node's own sockets belong in (local mode's
	// fabric: network.FabricNode.NetnsPath, for network.ListenTCP/DialTCP); empty means the
	// host's, the process's own.
	NodeNetns string
	// Migration overrides how this node's agent reaches the others' for live migration (by
	// default: NodeAddress in NodeNetns); nil and no NodeAddress: the node neither sends nor
	// receives migrations.
	Migration *controllers.MigrationNet
	// MigrationCreds is the node's migration certificate (from the cluster's migration CA),
	// which the agent's migration relays present to each other (TLS between the nodes); nil:
	// only plaintext migrations (disableTLS) run.
	MigrationCreds *controllers.NodeCreds
	// HeartbeatInterval is how often the agent beats (0: controllers.DefaultHeartbeat); the
	// cluster controller marks the node unschedulable after three without a beat.
	HeartbeatInterval time.Duration
	// MetricsAddress is where this node's metrics are served (host:port; a wildcard host is
	// published as the Node's address), published for vmctl top; "" when metrics are off.
	MetricsAddress string
	// Streams, when set, serves the node's VMI streams of the subresources API (package
	// vmistream) on Streams.Listener with Streams.TLS, published as the Node's
	// controllers.AnnotStreamsAddress.
	Streams *StreamsConfig
	// VMICaches hold VMIs the manager's cache does not (MigrationCaches); the manager's
	// client must read them too (UnionVMIs).
	VMICaches []cache.Cache
	Log       logr.Logger
}

// StreamsConfig is where and how the agent serves VMI streams.
type StreamsConfig struct {
	Listener net.Listener
	TLS      *tls.Config // vmistream.ServerTLS
	// Address is published for the aggregated server (default: the listener's address).
	Address string
	// CertSHA256 is the pin of a self-signed server certificate (ClusterStreams), published
	// as controllers.AnnotStreamsCertSHA256; "" when the certificate is CA-signed.
	CertSHA256 string
}

// ExitNotifier is a launcher runtime that reports launcher exits (process.Runtime does).
type ExitNotifier interface {
	SetOnExit(func(id string))
}

var _ ExitNotifier = (*process.Runtime)(nil)

// Agent is a node agent set up in a manager: heartbeat and VMI reconciler.
type Agent struct {
	Reconciler *controllers.VMIReconciler
	Facts      controllers.NodeFacts
	Heartbeat  *controllers.Heartbeat

	removeMetrics func()
}

// Setup adds the node agent to mgr: it probes the node (KVM, tun), writes the Node's labels
// once (creating the Node with Register), removes the volume folders of VMIs deleted while no
// agent ran, and registers the heartbeat and the VMI reconciler. Call before mgr.Start.
func Setup(ctx context.Context, mgr ctrl.Manager, cfg Config) (*Agent, error) {
	if cfg.NodeName == "" {
		return nil, errors.New("set up node agent: no node name")
	}
	if cfg.Runtime == nil {
		return nil, errors.New("set up node agent: no launcher runtime")
	}
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return nil, fmt.Errorf("new API client: %w", err)
	}
	facts, machine := probeFacts(ctx, cfg.Log)
	hb := &controllers.Heartbeat{Client: direct, NodeName: cfg.NodeName, Facts: facts, Register: cfg.Register, OwnsReady: cfg.OwnsNodeReady,
		Interval: cfg.HeartbeatInterval, MetricsAddress: cfg.MetricsAddress, StreamsAddress: cfg.Streams.address(), StreamsCertSHA256: cfg.Streams.pin()}
	if err := hb.Beat(ctx); err != nil {
		return nil, err
	}
	if err := mgr.Add(hb); err != nil {
		return nil, fmt.Errorf("add heartbeat: %w", err)
	}
	st, err := openStorage(cfg.Storage)
	if err != nil {
		return nil, err
	}
	if removed, err := removeOrphanVolumes(ctx, direct, cfg.Storage.VolumeRoot); err != nil || len(removed) > 0 {
		cfg.Log.Info("volumes of deleted VMIs removed", "folders", removed, "err", err)
	}
	var nn *controllers.NodeNetwork
	switch {
	case cfg.Network != nil:
		if nn, err = openNetwork(*cfg.Network); err != nil {
			return nil, err
		}
		if err := addBridgeWatch(mgr, nn, cfg.Log.WithName("network")); err != nil {
			return nil, err
		}
	case cfg.Pods != nil:
		// Someone else's pod networks: no secondary (multus) networks offered.
		nn = &controllers.NodeNetwork{Pods: cfg.Pods, Secondary: []string{}}
	}
	senv := cfg.Storage.env()
	// machine is the versioned q35 type this node's QEMU runs for "q35" (written into every
	// vmi's status; a migration keeps it).
	r := &controllers.VMIReconciler{
		Client:    mgr.GetClient(),
		Recorder:  mgr.GetEventRecorder("vmlet-agent"),
		NodeName:  cfg.NodeName,
		Runtime:   cfg.Runtime,
		Dial:      controllers.DialLauncher,
		Args:      controllers.DefaultLauncherArgs,
		KVM:       facts.KVM,
		Network:   nn,
		Storage:   st,
		APIReader: mgr.GetAPIReader(),
		Env: func(runDir string) translate.NodeEnv {
			return translate.NodeEnv{RunDir: runDir, Storage: senv, TCGCacheMiB: cfg.TCGCacheMiB, Machine: machine}
		},
		Migration: migrationNet(cfg),
		SELinux:   nodeSELinux(facts, cfg.Storage),
		VMICaches: cfg.VMICaches,
	}
	r.SELinux.LogState(cfg.Log)
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up VMI reconciler: %w", err)
	}
	if en, ok := cfg.Runtime.(ExitNotifier); ok {
		en.SetOnExit(r.WakeByID)
	}
	if err := addStreams(mgr, cfg, nn); err != nil {
		return nil, err
	}
	// The node's VMIs on the process's /metrics: one collector for all the agents of a process
	// (local mode's nodes), each VMI labelled with its node.
	removeMetrics, err := vmimetrics.AddToProcess(vmimetrics.Source{
		Node: cfg.NodeName, VMIs: mgr.GetClient(), Launchers: r, Migrations: mgr.GetClient(),
		Overhead: vmimetrics.BudgetedOverhead(facts.KVM, cfg.TCGCacheMiB),
	})
	if err != nil {
		return nil, fmt.Errorf("register VMI metrics: %w", err)
	}
	return &Agent{Reconciler: r, Facts: facts, Heartbeat: hb, removeMetrics: removeMetrics}, nil
}

// Close forgets the agent's in-process network state; the kernel state stays, as do the
// launchers and the guests' DHCP servers in them: a new agent picks them up. Call after the
// manager stopped.
func (a *Agent) Close() error {
	if a.removeMetrics != nil {
		a.removeMetrics()
	}
	if a.Reconciler.Network == nil {
		return nil
	}
	return a.Reconciler.Network.Close()
}

// LauncherUser is the user launchers (and QEMU) run as: uid:gid, with /dev/kvm's group as the
// one supplementary group where KVM is used and /dev/kvm is not open to everyone (udev makes
// it 0660 root:kvm on most distributions). A usable /dev/kvm that only root may open is an
// error: the node would advertise KVM its launchers cannot use.
func LauncherUser(uid, gid int) (process.User, error) {
	if uid < 0 || gid < 0 || uid > 1<<31 || gid > 1<<31 {
		return process.User{}, fmt.Errorf("launcher user %d:%d: %w: ids are 0..2^31", uid, gid, ErrBadFlag)
	}
	u := process.User{UID: uint32(uid), GID: uint32(gid)}
	if u.Root() || !devices.Probe().KVM.KVMUsable() {
		return u, nil
	}
	fi, err := os.Stat("/dev/kvm")
	if err != nil {
		return u, fmt.Errorf("launcher user %s: %w", u, err)
	}
	g, err := kvmGroup(fi, u)
	if err != nil {
		return u, err
	}
	if g != nil {
		u.Groups = []uint32{*g}
	}
	return u, nil
}

// kvmGroup is the supplementary group u needs to open /dev/kvm (fi), if any.
func kvmGroup(fi os.FileInfo, u process.User) (*uint32, error) {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case perm&0o006 == 0o006, ok && st.Uid == u.UID && perm&0o600 == 0o600:
		return nil, nil
	case ok && perm&0o060 == 0o060:
		if st.Gid == u.GID {
			return nil, nil
		}
		return &st.Gid, nil
	}
	return nil, fmt.Errorf("launcher user %s: %w: /dev/kvm is %v, only root may open it (make it 0660 root:kvm, as udev does, or use --launcher-uid 0)", u, ErrBadFlag, perm)
}

// StorageOwner is who a launcher user is handed VMI files as; nil for root.
func StorageOwner(u process.User) *storage.Owner {
	if u.Root() {
		return nil
	}
	return &storage.Owner{UID: int(u.UID), GID: int(u.GID)}
}

// ProcessOptions configure the process launcher runtime.
type ProcessOptions struct {
	Binary  string // vmlet-launcher
	RunRoot string // launcher run folders
	// CgroupParent is the folder, under the cgroup2 mount, of one jail per launcher (and,
	// under the cpu controller's mount, of the CPU groups).
	CgroupParent string
	User         process.User
	// CPUWeights gives each VM's cgroup the kubelet's CPU weight for its request, its vCPU
	// threads the lowest weight, and the calling process (the agent, and what it starts
	// later: local mode's control plane) the highest, in a group of its own (package
	// cpuweight). A host without a cpu controller runs without weights (logged).
	CPUWeights bool
	// OtherNode skips moving the calling process into this runtime's system CPU group: the
	// process is another node's agent first (local mode with several nodes, where only the
	// first node's system group holds it).
	OtherNode bool
	Log       logr.Logger
}

// ProcessRuntime is the process launcher runtime with each launcher in its own cgroup-v2 jail
// under <cgroup2 mount>/<CgroupParent>, which it makes. With CPUWeights it moves the calling
// process into the system CPU group: call it before starting what should share that priority.
func ProcessRuntime(o ProcessOptions) (*process.Runtime, error) {
	cg, err := devices.FindCgroup2Mount()
	if err != nil {
		return nil, fmt.Errorf("make process runtime: launchers run in cgroup-v2 jails: %w", err)
	}
	parent := filepath.Join(cg, o.CgroupParent)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("make launcher cgroup parent: %w", err)
	}
	if err := os.MkdirAll(o.RunRoot, 0o755); err != nil {
		return nil, fmt.Errorf("make run root: %w", err)
	}
	// An existing folder on the way that the launchers' user cannot pass (0700) would leave
	// every VMI unable to start its launcher: refuse now, naming it.
	if err := process.CheckSearchable(o.RunRoot, o.User, os.Stat); err != nil {
		return nil, fmt.Errorf("%w: run root %s: %w (let the launchers' user through, e.g. chmod o+x, or choose another --run-root)", ErrBadFlag, o.RunRoot, err)
	}
	rt := &process.Runtime{Binary: o.Binary, RunRoot: o.RunRoot, CgroupParent: parent, User: o.User}
	if !o.CPUWeights {
		return rt, nil
	}
	h, err := cpuweight.Find(o.CgroupParent)
	if errors.Is(err, cpuweight.ErrNoCPUController) {
		o.Log.Info("CPU weights off: no cpu controller; guests compete with the agent as equals", "err", err)
		return rt, nil
	}
	if err != nil {
		return nil, fmt.Errorf("make process runtime: %w", err)
	}
	if err := h.Setup(); err != nil {
		return nil, fmt.Errorf("make process runtime: %w", err)
	}
	if o.OtherNode {
		rt.CPU = h
		return rt, nil
	}
	if err := h.JoinSystem(os.Getpid()); err != nil {
		return nil, fmt.Errorf("make process runtime: %w", err)
	}
	o.Log.Info("CPU weights on", "cgroup", h.Root, "version", h.Version, "system", h.SystemPath())
	rt.CPU = h
	return rt, nil
}

// migrationNet is the node's migration network: cfg.Migration, or sockets on NodeAddress in
// NodeNetns.
func migrationNet(cfg Config) *controllers.MigrationNet {
	if cfg.Migration != nil || !cfg.NodeAddress.IsValid() {
		return cfg.Migration
	}
	ns := cfg.NodeNetns
	var tls controllers.MigrationTLS
	if cfg.MigrationCreds != nil {
		tls = cfg.MigrationCreds
	}
	return &controllers.MigrationNet{
		TLS:    tls,
		Addr:   cfg.NodeAddress,
		Listen: func(addr string) (net.Listener, error) { return network.ListenTCP(ns, addr) },
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			return network.DialTCP(ctx, ns, addr)
		},
	}
}

// nodeSELinux is the agent's SELinux settings for the node's probed state.
func nodeSELinux(facts controllers.NodeFacts, sc StorageConfig) *controllers.NodeSELinux {
	mode := sc.SELinuxRelabel
	if mode == "" {
		mode = controllers.RelabelAuto
	}
	return &controllers.NodeSELinux{State: facts.SELinux, Relabel: mode, ProcessType: sc.SELinuxLauncherType}
}
