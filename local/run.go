package local

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/health"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/pki"
)

// Config is `vmlet local`'s configuration.
type Config struct {
	StateDir       string // persisted: etcd data, kubeconfig, logs
	RunRoot        string // launcher run folders (short path)
	CgroupParent   string // cgroup (under the cgroup2 mount) holding one jail per launcher
	AssetsDir      string // kube-apiserver, etcd, kubectl
	CRDDir         string
	NodeName       string
	LauncherBinary string
	// Storage is the node's storage; empty folders default to StateDir/images (the image
	// cache shared by all VMIs) and StateDir/volumes (one folder per VMI, removed with it).
	nodeagent.StorageConfig
	// LauncherUser is who launchers and QEMU run as (nodeagent.LauncherUser).
	LauncherUser process.User
	// Demo is a VMI manifest applied at start (see ApplyDemo).
	Demo string
	// TCGCacheMiB bounds each TCG guest's translation cache.
	TCGCacheMiB int
	Out         io.Writer
	Log         logr.Logger
	// Network is the pod network vmlet provides as this machine's CNI.
	Network nodeagent.NetworkConfig
	// NoCPUWeights turns nodeagent.ProcessOptions.CPUWeights off.
	NoCPUWeights bool
	// Nodes is how many node agents run on this machine (`--nodes`). 0 or 1: one, NodeName,
	// with its bridge in Network.NetnsPath, as always. More: nodes NodeName-1 … NodeName-N,
	// each with a network namespace on a node fabric (network.EnsureFabric, its uplink in
	// Network.NetnsPath) and folders of its own (see planNodes); Network.Subnet is unused.
	Nodes int
	// Fabric is the node fabric's configuration with Nodes > 1 (zero: network's defaults,
	// namespaces vmlet-fabric and vmlet-node-NODE in /run/netns, 198.19.128.0/17).
	Fabric network.FabricConfig
	// Metrics and Probes, when set, serve the whole process's Prometheus metrics and its
	// /healthz and /readyz (the API server answers; every node's caches synced and launchers
	// answering); MetricsAddress is the metrics address every node publishes (vmctl top).
	Metrics, Probes net.Listener
	MetricsAddress  string
	// HeartbeatInterval is the node agents' (0: controllers.DefaultHeartbeat).
	HeartbeatInterval time.Duration
}

// Stack is a running local mode: control plane, node agents and local scheduler.
type Stack struct {
	CP *ControlPlane
	// Runtime and Agent are the first node's (the only one's with Config.Nodes <= 1).
	Runtime *process.Runtime
	Agent   *nodeagent.Agent
	// Nodes are all node agents, the first one first.
	Nodes []*LocalNode
	cfg   Config
}

// Start brings the local stack up: the node fabric (Config.Nodes > 1), control plane with
// CRDs, and per node a manager running its node agent (which registers its Node) with the
// process runtime; the first node's manager also runs the local scheduler for all of them.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	ctrl.SetLogger(cfg.Log)
	// client-go and the embedded subresources server (k8s.io/apiserver) log through klog:
	// into the same log, not onto the terminal of `make run`.
	klog.SetLogger(cfg.Log.WithName("klog"))
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "vmlet"
	}
	var fabric []network.FabricNode
	if cfg.multi() {
		var err error
		if fabric, err = network.EnsureFabric(cfg.fabricConfig(), cfg.NodeNames()); err != nil {
			return nil, fmt.Errorf("start local mode: %w", err)
		}
	}
	specs, err := planNodes(cfg, fabric)
	if err != nil {
		return nil, fmt.Errorf("start local mode: %w", err)
	}
	s := &Stack{cfg: cfg}
	// Before the control plane: with CPU weights, etcd and kube-apiserver are born in the
	// agent's high-weight group.
	for i, sp := range specs {
		rt, err := nodeagent.ProcessRuntime(nodeagent.ProcessOptions{
			Binary: cfg.LauncherBinary, RunRoot: sp.runRoot, CgroupParent: sp.cgroupParent,
			User: cfg.LauncherUser, CPUWeights: !cfg.NoCPUWeights, OtherNode: !sp.joinSystem, Log: cfg.Log,
		})
		if err != nil {
			return nil, fmt.Errorf("start local mode: node %s: %w", sp.name, err)
		}
		n := &LocalNode{Name: sp.name, Runtime: rt, spec: sp, mgrDone: make(chan error, 1)}
		if fabric != nil {
			n.Fabric = fabric[i]
		}
		s.Nodes = append(s.Nodes, n)
	}
	s.Runtime = s.Nodes[0].Runtime
	apiFlags, err := frontProxyFlags(cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("start local mode: %w", err)
	}
	cp, err := StartControlPlane(ctx, Options{
		APIServerFlags: apiFlags,
		StateDir:       cfg.StateDir,
		AssetsDir:      cfg.AssetsDir,
		CRDDirs:        []string{cfg.CRDDir},
		AddToScheme:    []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme},
		Log:            logFile(cfg.StateDir),
	})
	if err != nil {
		return nil, err
	}
	s.CP = cp
	if err := s.startManagers(ctx); err != nil {
		_ = s.stopManagers()
		_ = cp.Stop()
		return nil, err
	}
	return s, nil
}

// startManagers sets every node's agent up in a manager of its own (as if each were its own
// process), adds the scheduler to the first node's, then starts them.
func (s *Stack) startManagers(ctx context.Context) error {
	cfg := s.cfg
	mgrs := make([]manager.Manager, len(s.Nodes))
	sub, err := subresourceCreds(cfg.StateDir)
	if err != nil {
		return err
	}
	var ca *pki.CA
	if cfg.multi() {
		// The nodes' migrations go over TLS between their agents' relays with certificates of
		// this stack's CA, kept with the rest of its state.
		var err error
		if ca, _, err = pki.LoadOrCreateCA(filepath.Join(cfg.StateDir, "pki"), pki.CAOptions{CommonName: "vmlet local migration CA"}); err != nil {
			return fmt.Errorf("migration CA: %w", err)
		}
	}
	for i, n := range s.Nodes {
		var creds *controllers.NodeCreds
		if ca != nil && n.Fabric.Addr.IsValid() {
			creds = &controllers.NodeCreds{CA: ca, Node: pki.Node{Name: n.Name, Addrs: []netip.Addr{n.Fabric.Addr}}}
		}
		opts := manager.Options{
			Scheme:                 s.CP.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
		}
		if cfg.multi() {
			// The nodes' controllers have the same names: each manager stands for a process.
			opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
		}
		mgr, err := ctrl.NewManager(s.CP.Config, opts)
		if err != nil {
			return fmt.Errorf("new manager for node %s: %w", n.Name, err)
		}
		netCfg := n.spec.network
		streams, err := nodeStreams(sub, n.Name)
		if err != nil {
			return err
		}
		agent, err := nodeagent.Setup(ctx, mgr, nodeagent.Config{
			Streams:     streams,
			NodeName:    n.Name,
			Runtime:     n.Runtime,
			Storage:     n.spec.storage,
			Network:     &netCfg,
			TCGCacheMiB: cfg.TCGCacheMiB,
			Register:    true,
			// vmlet is this node's only agent: it owns the Node's Ready condition.
			OwnsNodeReady:     true,
			NodeAddress:       n.Fabric.Addr,
			NodeNetns:         n.Fabric.NetnsPath,
			MigrationCreds:    creds,
			HeartbeatInterval: cfg.HeartbeatInterval,
			MetricsAddress:    cfg.MetricsAddress,
			Log:               n.log(cfg),
		})
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		n.Agent = agent
		mgrs[i] = mgr
	}
	s.Agent = s.Nodes[0].Agent
	sched := &controllers.LocalScheduler{
		Client: mgrs[0].GetClient(), Recorder: mgrs[0].GetEventRecorder("vmlet-local-scheduler"),
		NodeReader: mgrs[0].GetAPIReader(),
		NodeName:   cfg.NodeName, NodeLabels: controllers.RegisteredLabels(cfg.NodeName, s.Agent.Facts),
	}
	if cfg.multi() {
		for _, n := range s.Nodes {
			sched.Nodes = append(sched.Nodes, controllers.LocalNode{Name: n.Name, Labels: controllers.RegisteredLabels(n.Name, n.Agent.Facts)})
		}
	}
	if err := sched.SetupWithManager(mgrs[0]); err != nil {
		return fmt.Errorf("setup scheduler: %w", err)
	}
	// The cluster side of live migration runs beside the scheduler, which places the targets.
	mc := &migration.Controller{
		Client: mgrs[0].GetClient(), Recorder: mgrs[0].GetEventRecorder("vmlet-migration"),
		APIReader: mgrs[0].GetAPIReader(), Pick: sched.PickTarget,
	}
	if err := mc.SetupWithManager(mgrs[0]); err != nil {
		return fmt.Errorf("setup migration controller: %w", err)
	}
	// Drains (vmlet.dev/drain:NoSchedule on a node) migrate, block or shut down its VMIs.
	ec := &evacuation.Controller{
		Client: mgrs[0].GetClient(), Recorder: mgrs[0].GetEventRecorder("vmlet-evacuation"), APIReader: mgrs[0].GetAPIReader(),
	}
	if err := ec.SetupWithManager(mgrs[0]); err != nil {
		return fmt.Errorf("setup evacuation controller: %w", err)
	}
	if err := s.addSubresources(ctx, mgrs[0], sub); err != nil {
		return err
	}
	if err := s.serve(mgrs); err != nil {
		return err
	}
	for i, n := range s.Nodes {
		mctx, cancel := context.WithCancel(context.Background())
		n.cancel = cancel
		go func(mgr manager.Manager, done chan<- error) { done <- mgr.Start(mctx) }(mgrs[i], n.mgrDone)
	}
	return nil
}

// Wait waits until done(vmi) holds for the VMI and returns it.
func (s *Stack) Wait(ctx context.Context, key client.ObjectKey, done func(*vmletv1.VirtualMachineInstance) bool) (*vmletv1.VirtualMachineInstance, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		vmi := &vmletv1.VirtualMachineInstance{}
		err := s.CP.Client.Get(ctx, key, vmi)
		if err == nil && done(vmi) {
			return vmi, nil
		}
		select {
		case <-ctx.Done():
			return vmi, fmt.Errorf("wait for %s: %w", key, ctx.Err())
		case <-t.C:
		}
	}
}

func logFile(dir string) io.Writer {
	f, err := os.OpenFile(filepath.Join(dir, "controlplane.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return io.Discard
	}
	return f
}

// serve adds the process's metrics and health endpoints to the first node's manager; /readyz
// checks the API server and, per node, its manager's caches and its launchers.
func (s *Stack) serve(mgrs []manager.Manager) error {
	if err := health.AddMetrics(mgrs[0], s.cfg.Metrics); err != nil {
		return err
	}
	if s.cfg.Probes == nil {
		return nil
	}
	api, err := health.APIReachable(s.CP.Config)
	if err != nil {
		return err
	}
	ready := health.Checks{"api-server": api}
	for i, n := range s.Nodes {
		suffix := ""
		if s.cfg.multi() {
			suffix = "-" + n.Name
		}
		ready["caches"+suffix] = health.CachesSynced(mgrs[i].GetCache())
		ready["launchers"+suffix] = n.Agent.LaunchersCheck()
		name, check := n.Agent.SELinuxCheck()
		ready[name+suffix] = check
	}
	return health.AddProbes(mgrs[0], s.cfg.Probes, health.Checks{"ping": healthz.Ping}, ready)
}

// log is the node's logger: the stack's, with the node's name when there are several.
func (n *LocalNode) log(cfg Config) logr.Logger {
	if !cfg.multi() {
		return cfg.Log
	}
	return cfg.Log.WithValues("node", n.Name)
}
