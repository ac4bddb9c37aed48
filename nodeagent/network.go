package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/network"
)

// NetworkConfig is the pod network vmlet provides when it acts as the CNI of this machine (local
// mode, and an agent with the process runtime): a node bridge, NAT to the outside and one netns
// + veth per launcher (network.Node).
type NetworkConfig struct {
	// Subnet is the pods' subnet; zero means network.DefaultNodeSubnet (198.19.118.0/24, a
	// benchmarking range hosts essentially never sit in).
	Subnet netip.Prefix
	// Subnet6 makes the pod network dual-stack; zero means IPv4 only.
	Subnet6 netip.Prefix
	// NetnsPath puts the node bridge in that network namespace instead of the host's (a
	// sandboxed node: guests reach only what that namespace routes to).
	NetnsPath string
	// NetnsDir is where the pods' network namespaces are bind-mounted; empty means
	// /run/netns (as `ip netns add`).
	NetnsDir string
	// ResolvConf is the resolv.conf whose nameservers DHCP offers guests; empty means
	// /etc/resolv.conf.
	ResolvConf string
	// NoMasquerade leaves pod traffic leaving the pod subnet un-NATed: the pod subnet is routed
	// (local mode's fabric, where the uplink masquerades what leaves the fabric).
	NoMasquerade bool
	// Shared, when set, offers the multus network controllers.SharedNetwork: one L2 segment
	// that every node of the machine shares (network.Segment), whose bridge lives in this
	// namespace (local mode's fabric namespace). An interface on it keeps its address on
	// every node, so VMIs attached to it migrate.
	Shared string
	// Node is this node's name on the shared segment (with Shared).
	Node string
}

func (cfg NetworkConfig) node() network.NodeConfig {
	return network.NodeConfig{Subnet: cfg.Subnet, Subnet6: cfg.Subnet6, NetnsPath: cfg.NetnsPath, NetnsDir: cfg.NetnsDir, NoMasquerade: cfg.NoMasquerade}
}

// openNetwork is the agent's network side for cfg. It changes nothing on the host: the node
// bridge and NAT appear with the first pod. It refuses a subnet other than the one the node's
// running pods were made with (network.ErrSubnetInUse): taking it would replace the bridge's
// gateway and NAT under their VMs.
func openNetwork(cfg NetworkConfig) (*controllers.NodeNetwork, error) {
	node, err := network.NewNode(cfg.node())
	if err != nil {
		return nil, fmt.Errorf("open node network: %w", err)
	}
	if err := node.CheckPods(); err != nil {
		return nil, fmt.Errorf("open node network: --node-subnet: %w: their VMs run; start with the subnet they were made with, or delete them first", err)
	}
	nn := &controllers.NodeNetwork{Pods: node, ResolvConf: cfg.ResolvConf}
	if cfg.Shared != "" {
		seg, err := network.NewSegment(network.SegmentConfig{NetnsPath: cfg.Shared, NetnsDir: node.Config().NetnsDir, Node: cfg.Node})
		if err != nil {
			return nil, fmt.Errorf("open node network: %w", err)
		}
		nn.Spanning = map[string]controllers.PodInterfaces{controllers.SharedNetwork: seg}
	}
	return nn, nil
}

// CloseNetwork ends the node network with the stack, once its launchers are gone (their DHCP
// servers with them): every pod network goes, the last one taking the node bridge and NAT
// table along. The next start creates them again for the VMIs that run again.
func CloseNetwork(nn *controllers.NodeNetwork) error {
	if nn == nil {
		return nil
	}
	errs := []error{nn.Close()}
	node, ok := nn.Pods.(*network.Node)
	if !ok {
		return errors.Join(errs...)
	}
	pods, err := node.Pods()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pod networks: %w", err))...)
	}
	for _, p := range pods {
		errs = append(errs, node.DeletePod(p.ID))
	}
	return errors.Join(errs...)
}

// ParseNetworkFlags reads `vmlet local`'s and `vmlet agent`'s --node-subnet, --node-subnet6 and --node-netns
// values (empty: the default).
func ParseNetworkFlags(subnet, subnet6, netnsPath string) (NetworkConfig, error) {
	c := NetworkConfig{NetnsPath: netnsPath}
	var err error
	if subnet != "" {
		if c.Subnet, err = netip.ParsePrefix(subnet); err != nil {
			return c, fmt.Errorf("parse --node-subnet: %w", err)
		}
	}
	if subnet6 != "" {
		if c.Subnet6, err = netip.ParsePrefix(subnet6); err != nil {
			return c, fmt.Errorf("parse --node-subnet6: %w", err)
		}
	}
	if _, err := network.NewNode(c.node()); err != nil {
		return c, fmt.Errorf("check node network flags: %w", err)
	}
	return c, nil
}

// bridgeResync is how often the bridge watch looks again without a kernel event.
const bridgeResync = 30 * time.Second

// addBridgeWatch makes the node bridge again whenever it is deleted under running VMs
// (network.Node.WatchBridge), for as long as the manager runs.
func addBridgeWatch(mgr manager.Manager, nn *controllers.NodeNetwork, log logr.Logger) error {
	node, ok := nn.Pods.(*network.Node)
	if !ok {
		return nil
	}
	r := manager.RunnableFunc(func(ctx context.Context) error {
		return node.WatchBridge(ctx, bridgeResync, func(err error) {
			if err != nil {
				log.Error(err, "the node bridge is gone under running VMs and could not be made again; retried")
				return
			}
			log.Info("the node bridge was deleted under running VMs: made again with their ports")
		})
	})
	if err := mgr.Add(streamsRunnable{r}); err != nil {
		return fmt.Errorf("add node bridge watch: %w", err)
	}
	return nil
}
