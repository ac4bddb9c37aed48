package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/cluster"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/health"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/migrationca"
	"github.com/vmlet/vmlet/controllers/translate"
)

// controllerFlags are `vmlet controller`'s settings.
type controllerFlags struct {
	pods  launcherpod.Options
	serve *serveFlags
	// subresourcesAddr is where the aggregated subresources API is served ("" off).
	subresourcesAddr string
	// evictionAddr is where the eviction webhook is served ("" off); evictionURL is the URL
	// it is registered at instead of the Service (a controller outside the cluster).
	evictionAddr, evictionURL string
	heartbeat                 time.Duration
	leaderElect               bool
	leaderElectNS             string
	leaderElectID             string
	developmentLog            bool
	agentGrace                time.Duration
}

func controllerCmd() *cobra.Command {
	var f controllerFlags
	c := &cobra.Command{
		Use:   "controller",
		Short: "Cluster controller: a launcher pod per VMI, scheduled by kube-scheduler",
		Long: `controller runs vmlet's cluster controller against a Kubernetes cluster: every pending
VirtualMachineInstance gets a launcher pod (guest memory + vmlet's measured overhead, node
selector for nodes whose vmlet agent is up), kube-scheduler places it, and the VMI is handed to
that node's agent (status.nodeName). A failed or deleted pod fails the VMI; a finished or deleted
VMI's pod is deleted. A live migration gets a target launcher pod, placed off the source node.
Run one replica, or several with --leader-elect.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd.Context(), f)
		},
	}
	fs := c.Flags()
	// --kubeconfig is controller-runtime's flag (client/config): explicit path, else
	// $KUBECONFIG, else the in-cluster service account, else ~/.kube/config.
	fs.AddGoFlag(flag.CommandLine.Lookup(config.KubeconfigFlagName))
	fs.StringVar(&f.pods.Image, "launcher-image", launcherpod.DefaultImage, "image of the launcher pods (holds "+launcherpod.Binary+")")
	fs.StringVar(&f.pods.LauncherRoot, "launcher-root", launcherpod.DefaultLauncherRoot, "node folder of launcher run folders (<root>/<vmi uid>); the node agent's must match")
	fs.StringVar(&f.pods.VolumeRoot, "volume-root", launcherpod.DefaultVolumeRoot, "node folder of VMI storage folders (<root>/<vmi uid>); the node agent's must match")
	fs.StringVar(&f.pods.ImageCache, "image-cache", launcherpod.DefaultImageCache, "node image cache, mounted read-only into launcher pods (containerDisk overlays' backing files); empty: none")
	fs.BoolVar(&f.pods.AllowEmulation, "allow-emulation", true, "let VMIs run under TCG (KubeVirt's useEmulation): launcher pods do not request "+launcherpod.ResourceKVM+
		" and run on any node, under TCG; false: they request it, so they run only where the node agent's device plugin advertises it (KVM usable) and under KVM")
	f.pods.RunAsUser, f.pods.RunAsGroup = new(int64), new(int64)
	fs.Int64Var(f.pods.RunAsUser, "launcher-uid", launcherpod.DefaultRunAsUser, "uid of the launcher pods (runAsUser, no capabilities); the node agents' --launcher-uid must match")
	fs.Int64Var(f.pods.RunAsGroup, "launcher-gid", launcherpod.DefaultRunAsGroup, "gid of the launcher pods (runAsGroup); the node agents' --launcher-gid must match")
	fs.IntVar(&f.pods.TCGCacheMiB, "tcg-cache-mib", launcherpod.DefaultTCGCacheMiB, "TCG translation cache per VM on the nodes (the agents' --tcg-cache-mib), budgeted in pod memory when emulation is allowed; 0: QEMU's default, budgeted as 1 GiB")
	f.serve = addServeFlags(fs, fmt.Sprintf(":%d", health.ControllerMetricsPort), fmt.Sprintf(":%d", health.ControllerHealthPort),
		"API server answers, caches synced")
	fs.DurationVar(&f.heartbeat, "node-heartbeat-interval", controllers.DefaultHeartbeat, "heartbeat interval of agents that publish none ("+
		controllers.AnnotHeartbeatInterval+"): a node whose "+controllers.AnnotHeartbeat+" is three intervals old gets "+
		controllers.LabelSchedulable+"=false and its VMIs Ready=False (NodeUnresponsive); those whose launcher pod is gone fail")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "elect a leader (a Lease) so that only one replica acts")
	fs.StringVar(&f.leaderElectNS, "leader-election-namespace", "", "namespace of the leader Lease (default: the pod's own namespace)")
	fs.StringVar(&f.leaderElectID, "leader-election-id", "vmlet-controller.vmlet.dev", "name of the leader Lease")
	fs.BoolVar(&f.developmentLog, "dev-log", false, "human-readable development logs instead of JSON")
	fs.StringVar(&f.evictionAddr, "eviction-webhook-bind-address", "", "where the admission webhook on launcher pods' evictions is served (config/controller: :9443, which the Service vmlet-system/vmlet-webhook targets): kubectl drain then migrates VMIs by their evictionStrategy; empty: off")
	fs.StringVar(&f.evictionURL, "eviction-webhook-url", "", "register the eviction webhook at this https URL instead of the Service vmlet-system/vmlet-webhook (a controller outside the cluster)")
	fs.StringVar(&f.subresourcesAddr, "subresources-bind-address", "", "where the aggregated subresources.vmlet.dev API is served (config/controller: :8443, which the Service vmlet-system/vmlet-subresources targets); empty: off")
	fs.DurationVar(&f.agentGrace, "agent-grace", cluster.DefaultAgentGrace, "how long a VMI whose launcher pod ended is left to its node agent (which knows why) before this controller fails it")
	return c
}

func runController(ctx context.Context, f controllerFlags) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(f.developmentLog)))
	cfg, err := config.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("add client-go scheme: %w", err)
	}
	if err := vmletv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("add vmlet scheme: %w", err)
	}
	if err := migrationsv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("add migrations scheme: %w", err)
	}
	if f.heartbeat <= 0 {
		return fmt.Errorf("--node-heartbeat-interval %s: want > 0", f.heartbeat)
	}
	mln, pln, err := f.serve.listen()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme,
		Cache:  cluster.CacheOptions(),
		// vmlet serves both itself, on listeners opened above (health.AddMetrics/AddProbes).
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        f.leaderElectID,
		LeaderElectionNamespace: f.leaderElectNS,
		// Stepping down ends the process (the manager returns), so nothing acts without the
		// lease.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("new manager: %w", err)
	}
	f.pods.Args, f.pods.DomainName = controllers.DefaultLauncherArgs, translate.DomainName
	r := &cluster.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("vmlet-controller"), Pods: f.pods, AgentGrace: f.agentGrace,
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the launcher pod controller: %w", err)
	}
	// Migrations are admitted here; each gets a target launcher pod (the same options as the
	// VMIs' pods), which kube-scheduler places off the source node.
	tp := &migration.TargetPods{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pods: f.pods}
	mc := &migration.Controller{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vmlet-migration"),
		Pick: tp.Pick, Pods: tp}
	if err := mc.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the migration controller: %w", err)
	}
	// Drains by taint (vmlet.dev/drain:NoSchedule): the same controller as in local mode.
	ec := &evacuation.Controller{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vmlet-evacuation"), PDBs: true}
	if err := ec.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the evacuation controller: %w", err)
	}
	nc := &cluster.NodeController{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder("vmlet-node-controller"), Interval: f.heartbeat}
	if err := nc.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the node controller: %w", err)
	}
	if err := addEvictionWebhook(ctx, mgr, f.evictionAddr, f.evictionURL); err != nil {
		return err
	}
	if err := addSubresources(ctx, mgr, f.subresourcesAddr); err != nil {
		return err
	}
	ready, err := managerChecks(mgr)
	if err != nil {
		return err
	}
	if err := serve(mgr, mln, pln, ready); err != nil {
		return err
	}
	ensureMigrationCA(ctx, cfg, scheme)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("run manager: %w", err)
	}
	return nil
}

// ensureMigrationCA makes the cluster's migration CA (a Secret the node agents issue their
// migration certificates from) when there is none. A failure is logged, not fatal: VMIs run
// without it, only migrations between nodes need it (the agents read it on first use).
func ensureMigrationCA(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme) {
	log := ctrl.Log.WithName("migration-ca")
	c, err := client.New(cfg, client.Options{Scheme: scheme}) // the manager's cache is not started yet
	if err == nil {
		_, err = migrationca.EnsureCA(ctx, c)
	}
	if err != nil {
		log.Error(err, "no migration CA: node agents cannot issue migration certificates until it exists")
	}
}
