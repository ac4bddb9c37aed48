package local

import (
	"fmt"
	"path/filepath"

	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/storage"
)

// DefaultPodNetnsRoot holds one folder of pod network namespaces per node when Config.Nodes >
// 1 and Network.NetnsDir is empty: not /run/netns, where `ip netns` would list the folders.
const DefaultPodNetnsRoot = "/run/vmlet-pods"

// LocalNode is one node agent of a local stack, with its own manager.
type LocalNode struct {
	Name    string
	Agent   *nodeagent.Agent
	Runtime *process.Runtime
	// Fabric is the node on the fabric (Config.Nodes > 1); zero for a single node, whose
	// bridge is in Config.Network.NetnsPath (the host's by default).
	Fabric network.FabricNode

	spec    nodeSpec
	cancel  func()
	mgrDone chan error
}

// nodeSpec is what one node agent gets: names and folders of its own.
type nodeSpec struct {
	name         string
	runRoot      string
	cgroupParent string
	storage      nodeagent.StorageConfig
	network      nodeagent.NetworkConfig // Subnet and NetnsPath from the fabric when multi
	joinSystem   bool                    // the agent process joins this node's system CPU group
}

// multi reports whether cfg runs more than one node.
func (cfg Config) multi() bool { return cfg.Nodes > 1 }

// NodeNames are the nodes' names: NodeName for a single node, NodeName-1 … NodeName-N for
// more (so no node looks like "the" machine's).
func (cfg Config) NodeNames() []string {
	if !cfg.multi() {
		return []string{cfg.NodeName}
	}
	names := make([]string, cfg.Nodes)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", cfg.NodeName, i+1)
	}
	return names
}

// fabricConfig is the fabric of a multi-node stack: its uplink in the single node's netns
// (Network.NetnsPath, the host's by default).
func (cfg Config) fabricConfig() network.FabricConfig {
	f := cfg.Fabric
	f.UplinkNetns = cfg.Network.NetnsPath
	return f
}

// planNodes lays the nodes out. A single node is exactly what `vmlet local` always ran: run
// root, cgroup parent, storage and network as configured. With more, node NAME gets
// RunRoot/NAME, CgroupParent/NAME, storage StateDir/nodes/NAME/{images,volumes} (or
// ImageCacheDir/NAME, VolumeRoot/NAME when set), pod namespaces in NetnsDir/NAME (default
// DefaultPodNetnsRoot/NAME) and the node namespace and pod subnet of fabric[i], routed without
// NAT. Claims (--claim) are the machine's: every node gets them, marked shared. Pure.
func planNodes(cfg Config, fabric []network.FabricNode) ([]nodeSpec, error) {
	names := cfg.NodeNames()
	cfg.Claims = sharedClaims(cfg.Claims)
	if !cfg.multi() {
		st := cfg.StorageConfig
		st.Defaults(cfg.StateDir)
		return []nodeSpec{{name: cfg.NodeName, runRoot: cfg.RunRoot, cgroupParent: cfg.CgroupParent,
			storage: st, network: cfg.Network, joinSystem: true}}, nil
	}
	if len(fabric) != len(names) {
		return nil, fmt.Errorf("plan nodes: %d nodes, %d on the fabric", len(names), len(fabric))
	}
	if cfg.Network.Subnet6.IsValid() {
		return nil, fmt.Errorf("plan nodes: %w: IPv6 pod subnets with several nodes", nodeagent.ErrBadFlag)
	}
	podRoot := cfg.Network.NetnsDir
	if podRoot == "" {
		podRoot = DefaultPodNetnsRoot
	}
	out := make([]nodeSpec, len(names))
	for i, n := range names {
		st := cfg.StorageConfig
		st.ImageCacheDir = perNode(st.ImageCacheDir, filepath.Join(cfg.StateDir, "nodes", n, "images"), n)
		st.VolumeRoot = perNode(st.VolumeRoot, filepath.Join(cfg.StateDir, "nodes", n, "volumes"), n)
		nw := cfg.Network
		nw.Subnet, nw.NetnsPath, nw.NoMasquerade = fabric[i].PodSubnet, fabric[i].NetnsPath, true
		nw.NetnsDir = filepath.Join(podRoot, n)
		nw.Shared, nw.Node = fabric[i].Fabric, n // the nodes' shared multus network, vmlet-shared
		out[i] = nodeSpec{name: n, runRoot: filepath.Join(cfg.RunRoot, n), cgroupParent: filepath.Join(cfg.CgroupParent, n),
			storage: st, network: nw, joinSystem: i == 0}
	}
	return out, nil
}

// sharedClaims returns the claims marked shared: every node of this machine opens the same
// path, so a migration between them opens a claim on the target as it is (a copy of the map).
func sharedClaims(claims map[string]storage.Claim) map[string]storage.Claim {
	if claims == nil {
		return nil
	}
	out := make(map[string]storage.Claim, len(claims))
	for k, c := range claims {
		c.Shared = true
		out[k] = c
	}
	return out
}

// perNode is dir/node when dir is set, def otherwise.
func perNode(dir, def, node string) string {
	if dir == "" {
		return def
	}
	return filepath.Join(dir, node)
}

// Node returns the node agent named name, or nil.
func (s *Stack) Node(name string) *LocalNode {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// NodeNames are the stack's nodes' names, the first one first.
func (s *Stack) NodeNames() []string {
	names := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		names[i] = n.Name
	}
	return names
}
