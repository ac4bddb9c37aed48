package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/nodeagent"
)

// agentOptions are `vmlet agent`'s flags beyond the shared node flags.
type agentOptions struct {
	kubeconfig     string
	nodeName       string
	runtime        string
	stateDir       string
	launcherBinary string
	runRoot        string
	cgroupParent   string
	register       bool
	metricsAddr    string
	healthAddr     string
}

func agentCmd() *cobra.Command {
	var o agentOptions
	var nf *nodeFlags
	c := &cobra.Command{
		Use:   "agent",
		Short: "Node agent: runs the VMIs scheduled to this node against an existing API server",
		Long: `agent reconciles the VMIs whose status.nodeName is this node (its cache holds no others):
it prepares storage and network, starts each VMI's launcher, drives QEMU through it and writes the
real domain state back into VMI status.

--runtime process runs each launcher as a process of this machine in its own cgroup-v2 jail, with
vmlet as the node's CNI (node bridge, NAT, a netns per launcher); the launchers outlive the agent
and a restarted agent adopts them. It needs something that sets status.nodeName (the cluster
controller's launcher pods, or a scheduler of your own).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, nc, err := nf.parse()
			if err != nil {
				return err
			}
			sc.Defaults(o.stateDir)
			return runAgent(cmd, o, sc, nc, nf.tcgCacheMiB)
		},
	}
	self, _ := os.Executable()
	host, _ := os.Hostname()
	f := c.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (empty: $KUBECONFIG or in-cluster)")
	f.StringVar(&o.nodeName, "node-name", strings.ToLower(host), "this node's name")
	f.StringVar(&o.runtime, "runtime", "process", "launcher runtime: process (launchers are processes of this machine)")
	f.StringVar(&o.stateDir, "state-dir", "/var/lib/vmlet", "node state: image cache and volume folders unless given")
	f.StringVar(&o.launcherBinary, "launcher", filepath.Join(filepath.Dir(self), "vmlet-launcher"), "vmlet-launcher binary (process runtime)")
	f.StringVar(&o.runRoot, "run-root", "/run/vmlet", "launcher run folders (keep short: unix socket paths)")
	f.StringVar(&o.cgroupParent, "cgroup-parent", "vmlet", "cgroup (under the cgroup2 mount) that holds one jail per launcher")
	f.BoolVar(&o.register, "register-node", false, "create the Node object if missing (no kubelet registers this node)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "metrics endpoint address (0: off)")
	f.StringVar(&o.healthAddr, "health-probe-bind-address", "0", "health probe address (0: off)")
	nf = addNodeFlags(f, true)
	return c
}

func runAgent(cmd *cobra.Command, o agentOptions, sc nodeagent.StorageConfig, nc nodeagent.NetworkConfig, tcgMiB int) error {
	ctx := cmd.Context()
	log := zap.New(zap.UseDevMode(false), zap.WriteTo(cmd.ErrOrStderr()))
	ctrl.SetLogger(log)
	if o.runtime != "process" {
		return fmt.Errorf("--runtime %q: want process", o.runtime)
	}
	if o.kubeconfig != "" {
		if err := os.Setenv("KUBECONFIG", o.kubeconfig); err != nil {
			return fmt.Errorf("set KUBECONFIG: %w", err)
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, vmletv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("build scheme: %w", err)
		}
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.healthAddr,
		// The agent caches only its own node's VMIs (status.nodeName is a selectable field).
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&vmletv1.VirtualMachineInstance{}: {Field: fields.OneTermEqualSelector("status.nodeName", o.nodeName)},
		}},
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	rt, err := nodeagent.ProcessRuntime(o.launcherBinary, o.runRoot, o.cgroupParent)
	if err != nil {
		return err
	}
	a, err := nodeagent.Setup(ctx, mgr, nodeagent.Config{
		NodeName: o.nodeName, Runtime: rt, Storage: sc, Network: &nc,
		TCGCacheMiB: tcgMiB, Register: o.register, Log: log,
	})
	if err != nil {
		return err
	}
	log.Info("node agent starting", "node", o.nodeName, "runtime", o.runtime, "kvm", a.Facts.KVM,
		"labels", a.Facts.Labels(), "runRoot", o.runRoot)
	err = mgr.Start(ctx)
	if cerr := a.Close(); cerr != nil {
		log.Error(cerr, "close agent network")
	}
	if err != nil {
		return fmt.Errorf("run node agent: %w", err)
	}
	return nil
}
