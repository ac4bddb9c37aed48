package local

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/nodeagent"
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
}

// Stack is a running local mode: control plane, node agent and local scheduler.
type Stack struct {
	CP      *ControlPlane
	Runtime *process.Runtime
	Agent   *nodeagent.Agent
	cancel  context.CancelFunc
	mgrDone chan error
	cfg     Config
}

// Start brings the local stack up: control plane with CRDs, Node registration, and a manager
// running the local scheduler and the node agent with the process runtime.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	ctrl.SetLogger(cfg.Log)
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "vmlet"
	}
	// Before the control plane: with CPU weights, etcd and kube-apiserver are born in the
	// agent's high-weight group.
	rt, err := nodeagent.ProcessRuntime(nodeagent.ProcessOptions{
		Binary: cfg.LauncherBinary, RunRoot: cfg.RunRoot, CgroupParent: cfg.CgroupParent,
		User: cfg.LauncherUser, CPUWeights: !cfg.NoCPUWeights, Log: cfg.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("start local mode: %w", err)
	}
	cp, err := StartControlPlane(ctx, Options{
		StateDir:    cfg.StateDir,
		AssetsDir:   cfg.AssetsDir,
		CRDDirs:     []string{cfg.CRDDir},
		AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme},
		Log:         logFile(cfg.StateDir),
	})
	if err != nil {
		return nil, err
	}
	s := &Stack{CP: cp, Runtime: rt, cfg: cfg, mgrDone: make(chan error, 1)}
	if err := s.startManager(ctx); err != nil {
		_ = cp.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Stack) startManager(ctx context.Context) error {
	cfg := s.cfg
	mgr, err := ctrl.NewManager(s.CP.Config, manager.Options{
		Scheme:                 s.CP.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	cfg.Defaults(cfg.StateDir)
	netCfg := cfg.Network
	agent, err := nodeagent.Setup(ctx, mgr, nodeagent.Config{
		NodeName:    cfg.NodeName,
		Runtime:     s.Runtime,
		Storage:     cfg.StorageConfig,
		Network:     &netCfg,
		TCGCacheMiB: cfg.TCGCacheMiB,
		Register:    true,
		// vmlet is this node's only agent: it owns the Node's Ready condition.
		OwnsNodeReady: true,
		Log:           cfg.Log,
	})
	if err != nil {
		return err
	}
	s.Agent = agent
	sched := &controllers.LocalScheduler{
		Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("vmlet-local-scheduler"),
		NodeName: cfg.NodeName, NodeLabels: agent.Facts.Labels(),
	}
	if err := sched.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setup scheduler: %w", err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.mgrDone <- mgr.Start(mctx) }()
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
