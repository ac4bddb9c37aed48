package network

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
)

// FabricConfig configures a node fabric: several nodes on one machine, each a network
// namespace of its own, joined by one L2 segment (a bridge in a fabric namespace) as the
// nodes of a cluster are by their LAN.
//
// Addresses: Subnet is cut into blocks of /PodBits. Block 0 is the fabric's link subnet: its
// first address is the uplink's (the host end of the veth from the fabric to UplinkNetns, the
// nodes' default gateway), node i takes address i+2. Block i+1 is node i's pod subnet. A node
// routes every other node's pod subnet via that node's address (no NAT between nodes or pods
// of the fabric); the uplink does the same and masquerades what leaves Subnet, so guests reach
// the host and beyond as on a single node.
type FabricConfig struct {
	// NetnsDir is where the fabric and node namespaces are bind-mounted; empty means
	// DefaultNetnsDir.
	NetnsDir string
	// Subnet holds the fabric's link subnet and every node's pod subnet; zero means
	// DefaultFabricSubnet.
	Subnet netip.Prefix
	// PodBits is the prefix length of each node's pod subnet (and of the link subnet); zero
	// means 24.
	PodBits int
	// Name prefixes everything the fabric creates: namespaces NAME-fabric and
	// NAME-node-NODE, the uplink veth NAME-fabric and the uplink's nftables table
	// NAME_fabric (inet). Empty means "vmlet". At most 8 of [a-z0-9].
	Name string
	// UplinkNetns is the namespace the fabric's uplink veth and NAT live in; empty means the
	// process's (the host's). Tests pass a namespace of their own.
	UplinkNetns string
	// MTU of the fabric's links; zero means 1500.
	MTU int
}

// FabricNode is one node on the fabric.
type FabricNode struct {
	Name      string
	NetnsPath string       // the node's network namespace: NodeConfig.NetnsPath
	Addr      netip.Addr   // the node's address on the fabric
	PodSubnet netip.Prefix // the node's pod subnet: NodeConfig.Subnet
	Gateway   netip.Addr   // the uplink's address: the node's default route
	// Link is the node's interface on the fabric, inside NetnsPath.
	Link string
	// Fabric is the fabric namespace, which every node reaches: where a Segment the nodes
	// share puts its bridge (SegmentConfig.NetnsPath).
	Fabric string
	// Peers are the other nodes' pod subnets and the addresses that route them.
	Peers []FabricRoute
}

// FabricRoute is a route a node (and the uplink) holds: Dst via Via.
type FabricRoute struct {
	Dst netip.Prefix
	Via netip.Addr
}

// DefaultFabricSubnet is 198.19.128.0/17: the upper half of 198.19.0.0/16, inside the RFC 2544
// benchmarking range for the same reasons as DefaultNodeSubnet (see there), and clear of
// DefaultNodeSubnet (198.19.118.0/24, in the lower half), so a single-node vmlet0 on the host
// and a fabric can exist at once. With /24 pod subnets it holds the link subnet
// 198.19.128.0/24 and up to 127 nodes (198.19.129.0/24, 198.19.130.0/24, ...).
var DefaultFabricSubnet = netip.MustParsePrefix("198.19.128.0/17")

const (
	// FabricLink is a node's interface on the fabric, inside the node's namespace.
	FabricLink = "fabric0"
	// fabricBridge is the fabric's bridge, inside the fabric namespace.
	fabricBridge = "fabric"
	// fabricUplinkPeer is the fabric end of the uplink veth, a port of the bridge.
	fabricUplinkPeer = "uplink"
	// fabricPortPrefix starts the fabric end of a node's veth ("vfn" + hash of the node).
	fabricPortPrefix = "vfn"
)

var (
	fabricNameRE = regexp.MustCompile(`^[a-z0-9]{1,8}$`)
	// nodeNameRE: a DNS label (Kubernetes node names in local mode), so NAME-node-NODE is a
	// valid file name.
	nodeNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
)

func (c FabricConfig) withDefaults() (FabricConfig, error) {
	if c.NetnsDir == "" {
		c.NetnsDir = DefaultNetnsDir
	}
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultFabricSubnet
	}
	if c.PodBits == 0 {
		c.PodBits = 24
	}
	if c.Name == "" {
		c.Name = "vmlet"
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	switch {
	case !fabricNameRE.MatchString(c.Name):
		return c, fieldErr("name", c.Name, ErrInvalidSpec, "want 1-8 of [a-z0-9]")
	case !c.Subnet.Addr().Is4() || c.Subnet != c.Subnet.Masked():
		return c, fieldErr("subnet", c.Subnet.String(), ErrInvalidSpec, "want an IPv4 network")
	case c.PodBits > 29 || c.PodBits <= c.Subnet.Bits():
		return c, fieldErr("podBits", fmt.Sprint(c.PodBits), ErrInvalidSpec, "want a prefix length longer than the subnet's and at most 29")
	case c.MTU < 576 || c.MTU > 65535:
		return c, fieldErr("mtu", fmt.Sprint(c.MTU), ErrInvalidSpec, "want 576..65535")
	case !filepath.IsAbs(c.NetnsDir):
		return c, fieldErr("netnsDir", c.NetnsDir, ErrInvalidSpec, "want an absolute path")
	case c.UplinkNetns != "" && !filepath.IsAbs(c.UplinkNetns):
		return c, fieldErr("uplinkNetns", c.UplinkNetns, ErrInvalidSpec, "want an absolute path")
	}
	return c, nil
}

// FabricNetns is the fabric namespace's path.
func (c FabricConfig) fabricNetns() string { return filepath.Join(c.NetnsDir, c.Name+"-fabric") }

// nodeNetnsPrefix starts every node namespace's file name.
func (c FabricConfig) nodeNetnsPrefix() string { return c.Name + "-node-" }

// uplink is the uplink veth's name in UplinkNetns.
func (c FabricConfig) uplink() string { return c.Name + "-fabric" }

// table is the uplink's nftables table (inet).
func (c FabricConfig) table() string { return c.Name + "_fabric" }

// linkSubnet is block 0 of Subnet.
func (c FabricConfig) linkSubnet() netip.Prefix { return c.block(0) }

// uplinkAddr is the uplink's address with the link subnet's length.
func (c FabricConfig) uplinkAddr() netip.Prefix {
	return netip.PrefixFrom(c.linkSubnet().Addr().Next(), c.PodBits)
}

// block is the i-th /PodBits block of Subnet.
func (c FabricConfig) block(i int) netip.Prefix {
	return netip.PrefixFrom(addOffset(c.Subnet.Addr(), uint32(i)<<(32-c.PodBits)), c.PodBits)
}

// maxNodes is how many nodes the subnet holds: a pod subnet each, an address each in the
// link subnet (without network, uplink and broadcast addresses).
func (c FabricConfig) maxNodes() int {
	blocks := 1<<(c.PodBits-c.Subnet.Bits()) - 1
	return min(blocks, 1<<(32-c.PodBits)-3)
}

func addOffset(a netip.Addr, off uint32) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + off
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// fabricPort is the fabric end of node's veth: "vfn" + 12 hex digits of the node's hash.
func fabricPort(node string) string {
	sum := sha256.Sum256([]byte(node))
	return fabricPortPrefix + hex.EncodeToString(sum[:6])
}

// PlanFabric computes the fabric for nodes, in that order: node i gets link address i+2 and
// pod subnet block i+1 (see FabricConfig), so the same list always gets the same plan. Pure.
func PlanFabric(cfg FabricConfig, nodes []string) ([]FabricNode, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("plan fabric: %w", err)
	}
	if len(nodes) > cfg.maxNodes() {
		return nil, fmt.Errorf("plan fabric: %w: %d nodes, %s with /%d pod subnets holds %d", ErrSubnetExhausted, len(nodes), cfg.Subnet, cfg.PodBits, cfg.maxNodes())
	}
	seen := map[string]bool{}
	out := make([]FabricNode, len(nodes))
	for i, n := range nodes {
		if !nodeNameRE.MatchString(n) {
			return nil, fmt.Errorf("plan fabric: %w", fieldErr("node", n, ErrInvalidSpec, "want a DNS label"))
		}
		if seen[n] {
			return nil, fmt.Errorf("plan fabric: %w", fieldErr("node", n, ErrInvalidSpec, "listed twice"))
		}
		seen[n] = true
		out[i] = FabricNode{
			Name:      n,
			NetnsPath: filepath.Join(cfg.NetnsDir, cfg.nodeNetnsPrefix()+n),
			Addr:      addOffset(cfg.linkSubnet().Addr(), uint32(i+2)),
			PodSubnet: cfg.block(i + 1),
			Gateway:   cfg.uplinkAddr().Addr(),
			Link:      FabricLink,
			Fabric:    cfg.fabricNetns(),
		}
	}
	for i := range out {
		for j, p := range out {
			if i != j {
				out[i].Peers = append(out[i].Peers, FabricRoute{Dst: p.PodSubnet, Via: p.Addr})
			}
		}
	}
	return out, nil
}

// uplinkRoutes are the uplink's routes: every node's pod subnet via the node.
func uplinkRoutes(nodes []FabricNode) []FabricRoute {
	rs := make([]FabricRoute, len(nodes))
	for i, n := range nodes {
		rs[i] = FabricRoute{Dst: n.PodSubnet, Via: n.Addr}
	}
	return rs
}

// fabricTable is the uplink's NAT: traffic from the fabric (nodes and pods) leaving Subnet is
// masqueraded to the uplink side's address on the way out; inside Subnet nothing is.
func fabricTable(cfg FabricConfig) *Table {
	return &Table{Family: FamilyInet, Name: cfg.table(), Chains: []Chain{{
		Name: "postrouting", Type: "nat", Hook: "postrouting", Priority: prioSrcNAT,
		Rules: []Rule{{Saddr: cfg.Subnet, Daddr: cfg.Subnet, NotDaddr: true, Action: ActionMasquerade}},
	}}}
}
