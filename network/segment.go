package network

import (
	"net/netip"
	"path/filepath"
	"strings"
)

// SegmentConfig configures a Segment: one L2 network that every node of a machine attaches
// its pods' secondary interfaces to (local mode's multus network "vmlet-shared" with several
// nodes), as a VLAN or a provider network spans the nodes of a cluster.
type SegmentConfig struct {
	// NetnsPath is the namespace of the segment's bridge, shared by the nodes (local mode's
	// fabric namespace). Required.
	NetnsPath string
	// Bridge is the segment's bridge; empty means DefaultSegmentBridge.
	Bridge string
	// Subnet is where the interfaces' addresses come from; zero means DefaultSegmentSubnet.
	// Its first address is never given out (nothing routes on a segment; the guests get no
	// router).
	Subnet netip.Prefix
	// NetnsDir is where this node's pod namespaces are (its NodeConfig.NetnsDir); empty means
	// DefaultNetnsDir.
	NetnsDir string
	// Node is this node's name: the host veths it makes are its own, so the pods of one VMI on
	// two nodes (a migration's source and target) each have one. A DNS label.
	Node string
	// MTU of the bridge and the veths; zero means 1500.
	MTU int
}

// Defaults of a Segment.
var (
	// DefaultSegmentSubnet is 198.19.119.0/24: next to DefaultNodeSubnet in the RFC 2544
	// benchmarking range (see DefaultNodeSubnet for why), clear of DefaultFabricSubnet.
	DefaultSegmentSubnet = netip.MustParsePrefix("198.19.119.0/24")
)

const (
	// DefaultSegmentBridge is a segment's bridge, inside its namespace.
	DefaultSegmentBridge = "vmlet-shared"
	// segmentTable is unused by a segment (it routes nothing) but keeps NodeConfig's
	// defaults from naming a node's table.
	segmentTable = "vmlet_segment"
)

// nodeConfig is the NodeConfig of the segment's bridge and pods.
func (c SegmentConfig) nodeConfig() (NodeConfig, error) {
	if c.NetnsPath == "" || !filepath.IsAbs(c.NetnsPath) {
		return NodeConfig{}, fieldErr("netnsPath", c.NetnsPath, ErrInvalidSpec, "want the absolute path of the segment's namespace")
	}
	if !nodeNameRE.MatchString(c.Node) || strings.ContainsAny(c.Node, " \t") {
		return NodeConfig{}, fieldErr("node", c.Node, ErrInvalidSpec, "want a DNS label")
	}
	bridge, subnet := c.Bridge, c.Subnet
	if bridge == "" {
		bridge = DefaultSegmentBridge
	}
	if !subnet.IsValid() {
		subnet = DefaultSegmentSubnet
	}
	return NodeConfig{NetnsPath: c.NetnsPath, Bridge: bridge, Subnet: subnet, NetnsDir: c.NetnsDir, MTU: c.MTU,
		Table: segmentTable, NoMasquerade: true}.withDefaults()
}
