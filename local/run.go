package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
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
	AssetsDir      string // kube-apiserver, etcd, kubectl
	CRDDir         string
	NodeName       string
	LauncherBinary string
	// Storage is the node's storage; empty folders default to StateDir/images (the image
	// cache shared by all VMIs) and StateDir/volumes (one folder per VMI, removed with it).
	nodeagent.StorageConfig
	// LauncherUser is who launchers and QEMU run as (nodeagent.LauncherUser).
	LauncherUser process.User
	// Demo is a VMI manifest applied at start (skipped when a VMI of that name exists).
	Demo string
	// TCGCacheMiB bounds each TCG guest's translation cache.
	TCGCacheMiB int
	Out         io.Writer
	Log         logr.Logger
	// Network is the pod network vmlet provides as this machine's CNI.
	Network nodeagent.NetworkConfig
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
	rt, err := nodeagent.ProcessRuntime(cfg.LauncherBinary, cfg.RunRoot, "vmlet", cfg.LauncherUser)
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
		Log:         cfg.Log,
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

// ApplyDemo creates the demo VMI unless one of that name exists, and returns its key.
func (s *Stack) ApplyDemo(ctx context.Context) (client.ObjectKey, error) {
	f, err := os.Open(s.cfg.Demo)
	if err != nil {
		return client.ObjectKey{}, fmt.Errorf("open demo manifest: %w", err)
	}
	defer f.Close()
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(vmi); err != nil {
		return client.ObjectKey{}, fmt.Errorf("decode demo manifest: %w", err)
	}
	if vmi.Namespace == "" {
		vmi.Namespace = "default"
	}
	key := client.ObjectKeyFromObject(vmi)
	if err := s.CP.Client.Create(ctx, vmi); err != nil && !apierrors.IsAlreadyExists(err) {
		return key, fmt.Errorf("create demo VMI: %w", err)
	}
	return key, nil
}

// WaitPhase waits until the VMI reaches phase (or a final phase) and returns it.
func (s *Stack) WaitPhase(ctx context.Context, key client.ObjectKey, phase vmletv1.VirtualMachineInstancePhase) (*vmletv1.VirtualMachineInstance, error) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		vmi := &vmletv1.VirtualMachineInstance{}
		err := s.CP.Client.Get(ctx, key, vmi)
		if err == nil && (vmi.Status.Phase == phase || vmi.Status.Phase == vmletv1.Failed || vmi.Status.Phase == vmletv1.Succeeded) {
			return vmi, nil
		}
		select {
		case <-ctx.Done():
			return vmi, fmt.Errorf("wait for %s to be %s: %w", key, phase, ctx.Err())
		case <-t.C:
		}
	}
}

// Stop shuts every launcher down gracefully (SIGTERM: ACPI powerdown within the grace period),
// then stops the manager and the control plane. VMIs stay in etcd: the next start runs them again.
func (s *Stack) Stop(ctx context.Context) error {
	var errs []error
	if s.Runtime != nil {
		if err := s.stopLaunchers(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cancel != nil {
		s.cancel()
		if err := <-s.mgrDone; err != nil {
			errs = append(errs, fmt.Errorf("manager: %w", err))
		}
	}
	if s.Agent != nil {
		if err := nodeagent.CloseNetwork(s.Agent.Reconciler.Network); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.CP.Stop(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Stack) stopLaunchers(ctx context.Context) error {
	ids, err := s.Runtime.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if err := s.Runtime.Stop(id); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range ids {
		if err := waitExited(ctx, s.Runtime, id); err != nil {
			errs = append(errs, err)
		}
		if err := s.Runtime.Remove(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func waitExited(ctx context.Context, r *process.Runtime, id string) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := r.State(id)
		if err != nil || st.Exited != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("launcher %s did not exit: %w", id, ctx.Err())
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
