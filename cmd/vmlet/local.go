package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/health"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/local"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
)

// localOptions are `vmlet local`'s flags beyond local.Config.
type localOptions struct {
	bootTimeout  time.Duration
	keepVMs      bool
	fabricSubnet string
	serve        *serveFlags
}

func localCmd() *cobra.Command {
	cfg := local.Config{}
	var nf *nodeFlags
	var o localOptions
	c := &cobra.Command{
		Use:   "local",
		Short: "Single-machine mode: embedded API server, node agent, demo VM",
		Long: `local starts etcd and kube-apiserver (data persisted in --state-dir), installs the
vmlet CRDs, registers this machine as a Node (vmlet owns its Ready condition: no kubelet runs
here), runs the node agent with launchers as local processes, applies the demo VMI and waits until
it runs.

Ctrl-C (or SIGTERM) is a graceful node shutdown, as the kubelet's: the agent stops reconciling,
every guest is shut down within its grace period, and each VMI ends Failed with reason
NodeShutdown (a VMI is one run of a VM; create it again to run it again). The next start deletes
a final demo VMI and creates it again. With --keep-vms, Ctrl-C leaves the VMs running (launchers
and QEMU untouched, VMIs untouched) and stops only vmlet and the control plane; the next start
adopts them, as it does after vmlet was killed.

--nodes N (N > 1) runs N node agents on this machine, nodes <node-name>-1 … <node-name>-N, as if
each were a machine of its own (what live migration needs): each gets a network namespace
vmlet-node-<node> joined to the others by a node fabric (namespace vmlet-fabric, a bridge; subnet
--fabric-subnet: a /24 for the fabric's links, then a routed /24 pod subnet per node, no NAT
between nodes; the fabric reaches the host, or --node-netns, through the veth vmlet-fabric,
which masquerades what leaves the fabric), its own run folders (<run-root>/<node>), cgroups
(<cgroup-parent>/<node>), storage (<state-dir>/nodes/<node>/{images,volumes}) and pod
namespaces (<pod-netns-dir, default /run/vmlet-pods>/<node>); claims (--claim) are the machine's,
the same path on every node, so a migration opens them on the target as they are (shared, as a
ReadWriteMany claim). VMIs go to the matching node with
the fewest VMIs. A node shutdown removes the fabric; --keep-vms leaves it for the next start.

One vmlet local per --state-dir: a second one fails at once. etcd and kube-apiserver die with the
vmlet that started them; those a killed vmlet left are stopped by the next start.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, nc, err := nf.parse()
			if err != nil {
				return err
			}
			if err := o.parseNodes(cmd, &cfg); err != nil {
				return err
			}
			cfg.StorageConfig, cfg.Network, cfg.TCGCacheMiB, cfg.LauncherUser = sc, nc, nf.tcgCacheMiB, nf.user
			cfg.NoCPUWeights = !nf.cpuWeights
			cfg.Out = cmd.OutOrStdout()
			cfg.Log = zap.New(zap.UseDevMode(false), zap.WriteTo(logWriter(cfg.StateDir)))
			return runLocal(cmd.Context(), cfg, o)
		},
	}
	self, _ := os.Executable()
	host, _ := os.Hostname()
	f := c.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/vmlet/local", "persisted state: etcd data, kubeconfig, logs")
	f.StringVar(&cfg.RunRoot, "run-root", "/run/vmlet", "launcher run folders (keep short: unix socket paths)")
	f.StringVar(&cfg.CgroupParent, "cgroup-parent", "vmlet", "cgroup (under the cgroup2 mount) that holds one jail per launcher")
	f.StringVar(&cfg.AssetsDir, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "folder with kube-apiserver, etcd, kubectl")
	f.StringVar(&cfg.CRDDir, "crds", "config/crd/bases", "folder of CRD manifests")
	f.StringVar(&cfg.NodeName, "node-name", strings.ToLower(host), "this node's name")
	f.StringVar(&cfg.LauncherBinary, "launcher", filepath.Join(filepath.Dir(self), "vmlet-launcher"), "vmlet-launcher binary")
	f.StringVar(&cfg.Demo, "demo", "config/samples/vmi-demo.yaml", "VMI manifest to apply at start (empty: none); a final one of that name is deleted and created again")
	f.BoolVar(&o.keepVMs, "keep-vms", false, "on Ctrl-C leave the VMs running (launchers, QEMU and VMIs untouched) and stop only vmlet and the control plane; the next start adopts them")
	f.IntVar(&cfg.Nodes, "nodes", 1, "how many nodes to run on this machine, each with its own network namespace on a node fabric (1: this machine is the node, bridge vmlet0 in the host's network namespace)")
	f.StringVar(&o.fabricSubnet, "fabric-subnet", network.DefaultFabricSubnet.String(), "with --nodes > 1: the node fabric's subnet (a /24 for the nodes' links, then one /24 pod subnet per node)")
	f.StringVar(&cfg.Fabric.Name, "fabric-name", "vmlet", "with --nodes > 1: prefix of the fabric's namespaces (NAME-fabric, NAME-node-NODE), uplink veth (NAME-fabric) and nft table (NAME_fabric); at most 8 of [a-z0-9]")
	nf = addNodeFlags(f, true)
	f.DurationVar(&o.bootTimeout, "boot-timeout", 3*time.Minute, "how long to wait for the demo VMI to run")
	o.serve = addServeFlags(f, fmt.Sprintf("127.0.0.1:%d", health.AgentMetricsPort), fmt.Sprintf("127.0.0.1:%d", health.AgentHealthPort),
		"one endpoint for the whole process: API server answers, every node's caches synced and every Running VMI's launcher answers within "+
			controllers.LauncherAnswerTimeout.String()+" (local mode runs no device plugin)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", controllers.DefaultHeartbeat, "how often each node agent writes its Node's "+controllers.AnnotHeartbeat+" and Ready condition")
	return c
}

func runLocal(ctx context.Context, cfg local.Config, o localOptions) (err error) {
	out := cfg.Out
	// 0711: the launchers' user passes through to the image cache and volume folders (which
	// keep their own modes); etcd data, kubeconfig and logs stay root's (0700/0600).
	if err := openStateDir(cfg.StateDir, vmletHome); err != nil {
		return err
	}
	if cfg.HeartbeatInterval <= 0 {
		return fmt.Errorf("--heartbeat-interval %s: %w: want > 0", cfg.HeartbeatInterval, nodeagent.ErrBadFlag)
	}
	var lerr error
	if cfg.Metrics, cfg.Probes, lerr = o.serve.listen(); lerr != nil {
		return lerr
	}
	cfg.MetricsAddress = localAddr(boundAddr(o.serve.metricsAddr, cfg.Metrics))
	fmt.Fprintf(out, "vmlet local: starting etcd + kube-apiserver (state in %s)...\n", cfg.StateDir)
	s, err := local.Start(ctx, cfg)
	if err != nil {
		return err
	}
	for _, p := range s.CP.Reclaimed {
		fmt.Fprintf(out, "vmlet local: stopped %s (pid %d) left running by a previous vmlet local\n", p.Name, p.Pid)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var serr error
		if o.keepVMs {
			fmt.Fprintln(out, "vmlet local: --keep-vms: leaving the VMs running; stopping vmlet and the control plane...")
			serr = s.Leave(sctx)
		} else {
			fmt.Fprintln(out, "vmlet local: node shutdown: shutting the guests down (their VMIs end Failed, reason NodeShutdown), stopping the control plane...")
			serr = s.Shutdown(sctx)
		}
		if serr != nil {
			err = errors.Join(err, fmt.Errorf("stop local mode: %w", serr))
			return
		}
		fmt.Fprintln(out, "vmlet local: stopped")
	}()
	kc := s.CP.Kubeconfig
	if len(s.Nodes) > 1 {
		fmt.Fprintf(out, "vmlet local: API server up; kubeconfig %s; nodes %s registered\n", kc, strings.Join(s.NodeNames(), ", "))
		for _, n := range s.Nodes {
			fmt.Fprintf(out, "vmlet local: node %s: netns %s, address %s, pods %s\n", n.Name, n.Fabric.NetnsPath, n.Fabric.Addr, n.Fabric.PodSubnet)
		}
		fmt.Fprintf(out, "vmlet local: multus networks: %s (each node's own bridge), %s (%s, shared by the nodes: its interfaces migrate)\n",
			strings.Join(controllers.DefaultSecondaryNetworks, ", "), controllers.SharedNetwork, network.DefaultSegmentSubnet)
	} else {
		fmt.Fprintf(out, "vmlet local: API server up; kubeconfig %s; node %s registered\n", kc, cfg.NodeName)
	}
	if cfg.Metrics != nil || cfg.Probes != nil {
		fmt.Fprintf(out, "vmlet local: metrics %s, health %s\n", endpoint(cfg.Metrics, health.MetricsPath), endpoint(cfg.Probes, health.ReadinessPath))
	}
	if cfg.Demo != "" {
		if err := demo(ctx, s, cfg, o); err != nil && ctx.Err() == nil { // not Ctrl-C meanwhile
			return err
		}
	}
	<-ctx.Done()
	return nil
}

// demo applies the demo VMI, waits until it runs and says how to look at it.
func demo(ctx context.Context, s *local.Stack, cfg local.Config, o localOptions) error {
	out := cfg.Out
	d, err := s.ApplyDemo(ctx)
	if err != nil {
		return err
	}
	switch {
	case d.Unserved != nil:
		fmt.Fprintf(out, "vmlet local: demo VMI %s (%s) is on node %s, which this run does not have (an earlier run had more nodes); "+
			"only that node's agent can end or clean it up: start with as many nodes again (--nodes) and delete it. No demo this time.\n",
			d.Key, local.Phase(d.Unserved), d.Unserved.Status.NodeName)
		return nil
	case d.Replaced != nil:
		fmt.Fprintf(out, "vmlet local: demo VMI %s had ended: %s; deleted it and created it again from %s\n",
			d.Key, local.Phase(d.Replaced), cfg.Demo)
	case d.Existing:
		fmt.Fprintf(out, "vmlet local: demo VMI %s exists and has not ended; adopting it\n", d.Key)
	default:
		fmt.Fprintf(out, "vmlet local: applied demo VMI %s from %s\n", d.Key, cfg.Demo)
	}
	fmt.Fprintln(out, "vmlet local: waiting for it to run (a TCG boot takes a few seconds)...")
	wctx, cancel := context.WithTimeout(ctx, o.bootTimeout)
	defer cancel()
	vmi, err := s.Wait(wctx, d.Key, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Running || vmistatus.IsFinal(v.Status.Phase)
	})
	if err != nil {
		return err
	}
	if vmi.Status.Phase == vmletv1.Running {
		// The address follows the guest's DHCP; say it if it comes soon.
		ictx, cancel := context.WithTimeout(wctx, 30*time.Second)
		if v, err := s.Wait(ictx, d.Key, hasAddress); err == nil {
			vmi = v
		}
		cancel()
	}
	fmt.Fprintf(out, "vmlet local: %s\n", local.Summary(vmi))
	stop := "Ctrl-C shuts the node down: the guests power off and their VMIs end Failed (NodeShutdown);\nthe next start creates the demo VMI again."
	if o.keepVMs {
		stop = "Ctrl-C stops vmlet and the control plane and leaves the VMs running (--keep-vms);\nthe next start adopts them."
	}
	fmt.Fprintf(out, `
Try (kubectl from %[4]s, built with the control plane):
  export KUBECONFIG=%[1]s PATH=%[4]s:$PATH
  kubectl get nodes
  kubectl get vmis -o wide
  kubectl get vmi %[2]s -o yaml
  kubectl patch vmi %[2]s --type merge -p '{"spec":{"paused":true}}'
  tail -f %[3]s/logs/serial.log      # the guest's console
  kubectl delete vmi %[2]s

%[5]s
`, s.CP.Kubeconfig, d.Key.Name, runtimeOf(s, vmi).Dir(string(vmi.UID)), cfg.AssetsDir, stop)
	return nil
}

// runtimeOf is the launcher runtime of the node the VMI runs on (the first node's if unknown).
func runtimeOf(s *local.Stack, vmi *vmletv1.VirtualMachineInstance) *process.Runtime {
	if n := s.Node(vmi.Status.NodeName); n != nil {
		return n.Runtime
	}
	return s.Runtime
}

// parseNodes checks --nodes and the flags that go with it.
func (o localOptions) parseNodes(cmd *cobra.Command, cfg *local.Config) error {
	if cfg.Nodes < 1 {
		return fmt.Errorf("--nodes %d: %w: want at least 1", cfg.Nodes, nodeagent.ErrBadFlag)
	}
	if cfg.Nodes == 1 {
		return nil
	}
	for _, name := range []string{"node-subnet", "node-subnet6"} {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s with --nodes %d: %w: each node's pod subnet comes from --fabric-subnet", name, cfg.Nodes, nodeagent.ErrBadFlag)
		}
	}
	p, err := netip.ParsePrefix(o.fabricSubnet)
	if err != nil {
		return fmt.Errorf("parse --fabric-subnet: %w", err)
	}
	cfg.Fabric.Subnet = p
	if _, err := network.PlanFabric(cfg.Fabric, cfg.NodeNames()); err != nil {
		return fmt.Errorf("check --nodes/--fabric-subnet/--fabric-name: %w", err)
	}
	return nil
}

func hasAddress(v *vmletv1.VirtualMachineInstance) bool {
	if vmistatus.IsFinal(v.Status.Phase) {
		return true
	}
	for _, i := range v.Status.Interfaces {
		if i.IP != "" {
			return true
		}
	}
	return false
}

// endpoint is the URL of path on ln ("off" without ln).
func endpoint(ln net.Listener, path string) string {
	if ln == nil {
		return "off"
	}
	return "http://" + localAddr(ln.Addr().String()) + path
}

// localAddr is a bound address as this machine reaches it: a wildcard host is 127.0.0.1.
func localAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// logWriter sends controller logs to <state>/vmlet.log so the terminal shows progress only.
func logWriter(stateDir string) io.Writer {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return os.Stderr
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "vmlet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return os.Stderr
	}
	return f
}
