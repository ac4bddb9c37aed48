package main

import (
	"cmp"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/health"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/podruntime"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/nodeagent/deviceplugin"
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
	launcherRoot   string
	register       bool
	serve          *serveFlags
	// advertise is the metrics address published on the Node (vmctl top scrapes it).
	advertise string
	heartbeat time.Duration
	// streamsAddr is where the VMI streams of the subresources API are served ("" off);
	// streamsAdvertise what is published instead of it.
	streamsAddr, streamsAdvertise string
	// migrationAddress is the node's address for live migrations ("" none).
	migrationAddress string
	// devicePlugins runs the kubelet device plugin (pod runtime); devicePluginDir is the
	// kubelet's device-plugins folder, devicePluginCount the devices per resource.
	devicePlugins     bool
	devicePluginDir   string
	devicePluginCount int
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
and a restarted agent adopts them. It needs something that sets status.nodeName (a scheduler of
your own).

--runtime pod is cluster mode: the cluster controller (vmlet controller) creates a launcher pod
per VMI and sets status.nodeName once the pod is scheduled; the kubelet runs the launcher, whose
hostPath run folder is <launcher-root>/<vmi uid>. The agent runs with hostPID and host cgroup
namespace: it finds the launcher by its socket, filters its devices with eBPF, wires the VMI's
bindings in the pod's network namespace (made by the cluster's CNI) and drives QEMU.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, nc, err := nf.parse()
			if err != nil {
				return err
			}
			if err := openStateDir(o.stateDir, vmletHome); err != nil {
				return err
			}
			sc.Defaults(o.stateDir)
			return runAgent(cmd, o, sc, nc, nf.tcgCacheMiB, nf.user, nf.cpuWeights)
		},
	}
	self, _ := os.Executable()
	host, _ := os.Hostname()
	f := c.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (empty: $KUBECONFIG or in-cluster)")
	f.StringVar(&o.nodeName, "node-name", strings.ToLower(host), "this node's name")
	f.StringVar(&o.runtime, "runtime", "process", "launcher runtime: process (launchers are processes of this machine) or pod (launcher pods)")
	f.StringVar(&o.launcherRoot, "launcher-root", launcherpod.DefaultLauncherRoot, "pod runtime: host folder of the launcher pods' run folders (their hostPath)")
	f.StringVar(&o.stateDir, "state-dir", "/var/lib/vmlet", "node state: image cache and volume folders unless given")
	f.StringVar(&o.launcherBinary, "launcher", filepath.Join(filepath.Dir(self), "vmlet-launcher"), "vmlet-launcher binary (process runtime)")
	f.StringVar(&o.runRoot, "run-root", "/run/vmlet", "launcher run folders (keep short: unix socket paths)")
	f.StringVar(&o.cgroupParent, "cgroup-parent", "vmlet", "cgroup (under the cgroup2 mount) that holds one jail per launcher")
	f.BoolVar(&o.register, "register-node", false, "create the Node object if missing (no kubelet registers this node)")
	o.serve = addServeFlags(f, fmt.Sprintf(":%d", health.AgentMetricsPort), fmt.Sprintf(":%d", health.AgentHealthPort),
		"API server answers, caches synced, every Running VMI's launcher answers within "+controllers.LauncherAnswerTimeout.String()+
			"; with --runtime pod and --device-plugins, every device plugin resource registered with the kubelet")
	f.StringVar(&o.advertise, "metrics-advertise-address", "", "metrics address published on the Node ("+controllers.AnnotMetricsAddress+
		", what vmctl top scrapes); empty: --"+flagMetricsAddr+" with the bound port, a wildcard host published as the Node's InternalIP")
	f.DurationVar(&o.heartbeat, "heartbeat-interval", controllers.DefaultHeartbeat, "how often the agent writes the Node's "+controllers.AnnotHeartbeat+
		"; vmlet controller marks the node unschedulable after three intervals without one")
	f.StringVar(&o.streamsAddr, "streams-bind-address", "", fmt.Sprintf("where the VMI streams of the subresources API (console, VNC, QMP, port-forward) are served, mTLS (config/agent: :%d); empty: off", nodeagent.DefaultStreamsPort))
	f.StringVar(&o.streamsAdvertise, "streams-advertise-address", "", "streams address published on the Node ("+controllers.AnnotStreamsAddress+"); empty: the bound one, a wildcard host published as the Node's InternalIP")
	f.StringVar(&o.migrationAddress, "migration-address", "", "this node's IP address for live migrations: the agents relay QEMU's stream between them (config/agent passes the node's host IP); empty: the node neither sends nor receives migrations")
	f.BoolVar(&o.devicePlugins, "device-plugins", true, "pod runtime: run the kubelet device plugin advertising "+
		strings.Join([]string{launcherpod.ResourceKVM, launcherpod.ResourceTun, launcherpod.ResourceVhostNet}, ", ")+
		" where this node has them (kvm only where KVM is usable), which launcher pods request")
	f.StringVar(&o.devicePluginDir, "device-plugin-dir", pluginapi.DevicePluginPath, "pod runtime: the kubelet's device-plugins folder, where its kubelet.sock is (the kubelet's is fixed, whatever its --root-dir)")
	f.IntVar(&o.devicePluginCount, "device-plugin-count", deviceplugin.DefaultCount, "pod runtime: devices advertised per resource (how many launcher pods of this node may use one device node)")
	nf = addNodeFlags(f, true)
	return c
}

func runAgent(cmd *cobra.Command, o agentOptions, sc nodeagent.StorageConfig, nc nodeagent.NetworkConfig, tcgMiB int, user process.User, cpuWeights bool) error {
	ctx := cmd.Context()
	log := zap.New(zap.UseDevMode(false), zap.WriteTo(cmd.ErrOrStderr()))
	ctrl.SetLogger(log)
	if o.runtime != "process" && o.runtime != "pod" {
		return fmt.Errorf("--runtime %q: want process or pod", o.runtime)
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
	if o.heartbeat <= 0 {
		return fmt.Errorf("--heartbeat-interval %s: %w: want > 0", o.heartbeat, nodeagent.ErrBadFlag)
	}
	mln, pln, err := o.serve.listen()
	if err != nil {
		return err
	}
	// The VMIs migrating to or from this node are in caches of their own (the manager's holds
	// this node's, with the same REST mapper); the agent reads them all through one client.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return fmt.Errorf("api client: %w", err)
	}
	migrating, err := nodeagent.MigrationCaches(cfg, cache.Options{Scheme: scheme, HTTPClient: httpClient, Mapper: mapper}, o.nodeName)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:         scheme,
		MapperProvider: func(*rest.Config, *http.Client) (meta.RESTMapper, error) { return mapper, nil },
		NewClient: func(c *rest.Config, co client.Options) (client.Client, error) {
			if co.Cache != nil && co.Cache.Reader != nil {
				co.Cache.Reader = nodeagent.UnionVMIs(co.Cache.Reader, migrating)
			}
			return client.New(c, co)
		},
		// vmlet serves both itself, on listeners opened above (health.AddMetrics/AddProbes).
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The agent caches only its own node's VMIs (status.nodeName is a selectable field)
		// and launcher pods.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&vmletv1.VirtualMachineInstance{}: {Field: fields.OneTermEqualSelector("status.nodeName", o.nodeName)},
			&corev1.Pod{}: {
				Field: fields.OneTermEqualSelector("spec.nodeName", o.nodeName),
				Label: launcherpod.PodSelector(), // launcher and attachment pods
			},
		}},
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	for _, c := range migrating {
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("add migration cache: %w", err)
		}
	}
	acfg := nodeagent.Config{NodeName: o.nodeName, Storage: sc, TCGCacheMiB: tcgMiB, Register: o.register, Log: log,
		HeartbeatInterval: o.heartbeat, MetricsAddress: cmp.Or(o.advertise, boundAddr(o.serve.metricsAddr, mln)),
		VMICaches: migrating}
	if acfg.NodeAddress, acfg.MigrationCreds, err = agentMigration(cfg, o, log); err != nil {
		return err
	}
	if mln == nil {
		acfg.MetricsAddress = ""
	}
	var pods *podruntime.Runtime
	if o.runtime == "pod" {
		cg, err := devices.FindCgroup2Mount()
		if err != nil {
			return fmt.Errorf("pod runtime: %w", err)
		}
		pods = &podruntime.Runtime{Pods: mgr.GetClient(), Live: mgr.GetAPIReader(), Resizer: mgr.GetClient(), LauncherRoot: o.launcherRoot, CgroupRoot: cg, User: user}
		acfg.Runtime, acfg.Pods = pods, podruntime.Networks{Runtime: pods}
	} else {
		rt, err := nodeagent.ProcessRuntime(nodeagent.ProcessOptions{
			Binary: o.launcherBinary, RunRoot: o.runRoot, CgroupParent: o.cgroupParent, User: user,
			CPUWeights: cpuWeights, Log: log,
		})
		if err != nil {
			return err
		}
		acfg.Runtime, acfg.Network = rt, &nc
	}
	if acfg.Streams, err = agentStreams(ctx, cfg, scheme, o); err != nil {
		log.Error(err, "VMI streams off: the subresources API cannot reach this node's VMIs")
	}
	a, err := nodeagent.Setup(ctx, mgr, acfg)
	if err != nil {
		return err
	}
	if pods != nil {
		if err := pods.WatchExits(ctx, mgr.GetCache()); err != nil {
			return err
		}
	}
	ready, err := managerChecks(mgr)
	if err != nil {
		return err
	}
	if pods != nil && o.devicePlugins {
		dp, err := startDevicePlugin(mgr, o, log)
		if err != nil {
			return err
		}
		ready["device-plugin"] = dp.Check
	}
	ready["launchers"] = a.LaunchersCheck()
	name, check := a.SELinuxCheck()
	ready[name] = check
	if err := serve(mgr, mln, pln, ready); err != nil {
		return err
	}
	log.Info("node agent starting", "node", o.nodeName, "runtime", o.runtime, "kvm", a.Facts.KVM,
		"labels", a.Facts.Labels(), "runRoot", o.runRoot, "metrics", boundAddr(o.serve.metricsAddr, mln),
		"health", boundAddr(o.serve.healthAddr, pln), "qemu", a.Facts.QEMUVersion, "cpu", a.Facts.CPUModel)
	err = mgr.Start(ctx)
	if cerr := a.Close(); cerr != nil {
		log.Error(cerr, "close agent network")
	}
	if err != nil {
		return fmt.Errorf("run node agent: %w", err)
	}
	return nil
}

// startDevicePlugin adds the kubelet device plugin to mgr: the resources this node has
// (deviceplugin.Probe), registered with the kubelet at --device-plugin-dir.
func startDevicePlugin(mgr manager.Manager, o agentOptions, log logr.Logger) (*deviceplugin.Manager, error) {
	if o.devicePluginCount <= 0 {
		return nil, fmt.Errorf("--device-plugin-count %d: %w: want > 0", o.devicePluginCount, nodeagent.ErrBadFlag)
	}
	facts := deviceplugin.Probe()
	dp, err := deviceplugin.New(deviceplugin.Options{Dir: o.devicePluginDir, Count: o.devicePluginCount,
		Resources: deviceplugin.Select(facts), Log: log.WithName("device-plugin")})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(dp); err != nil {
		return nil, fmt.Errorf("add device plugin: %w", err)
	}
	log.Info("device plugin", "resources", dp.Resources(), "devices", o.devicePluginCount, "dir", o.devicePluginDir,
		"kvm", facts.KVM, "tun", facts.Tun, "vhostNet", facts.VhostNet)
	return dp, nil
}
