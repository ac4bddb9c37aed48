package network

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
)

// NodeConfig configures the local-mode pod network: vmlet acts as the CNI and gives every
// launcher a netns with an "eth0" on a node bridge.
type NodeConfig struct {
	// NetnsPath is the node's network namespace (where the bridge lives); empty means the
	// calling process's, i.e. the host's. Tests pass a namespace of their own.
	NetnsPath string
	// Bridge is the node bridge; empty means DefaultBridge.
	Bridge string
	// Subnet is the pod subnet; zero means DefaultNodeSubnet. The bridge takes its first
	// address (the pods' gateway), pods the following ones.
	Subnet netip.Prefix
	// Subnet6 makes the pod network dual-stack: an IPv6 prefix (/64../120) whose first
	// address is the bridge's and whose host part for each pod equals that of its IPv4
	// address (198.19.118.5 -> PREFIX::5). Zero means IPv4 only. Enabling it turns on IPv6
	// forwarding in the node's netns (which, on a host, stops it from accepting router
	// advertisements on interfaces with accept_ra=1). DefaultNodeSubnet6 is a ULA choice.
	Subnet6 netip.Prefix
	// NetnsDir is where pod namespaces are bind-mounted; empty means DefaultNetnsDir (where
	// `ip netns` looks).
	NetnsDir string
	// MTU of the bridge and the veths; zero means 1500.
	MTU int
	// Table is the node's nftables table (inet family); empty means DefaultNodeTable.
	Table string
	// NoMasquerade leaves pod traffic leaving the node un-NATed (a routed pod subnet).
	NoMasquerade bool
}

// Defaults of the local-mode pod network.
var (
	// DefaultNodeSubnet is 198.19.118.0/24, inside 198.18.0.0/15, which RFC 2544 reserves for
	// benchmarking and which is never routed on the Internet. Unlike RFC 1918 ranges (home and
	// corporate LANs, Docker's 172.17/16, Kubernetes' usual 10.x pod and service CIDRs) or
	// 100.64.0.0/10 (carrier-grade NAT, Tailscale), hosts essentially never sit in it; and
	// 198.18.0.0/16, used by some proxies for fake-IP DNS, is avoided. Creating the bridge
	// still refuses a subnet that overlaps an existing route (ErrSubnetConflict).
	DefaultNodeSubnet = netip.MustParsePrefix("198.19.118.0/24")
	// DefaultNodeSubnet6 is a unique local (RFC 4193) /64 whose global id spells "vmlet"
	// (76 6d 6c 65 74): never routed on the Internet, and unlikely to meet another ULA.
	DefaultNodeSubnet6 = netip.MustParsePrefix("fd76:6d6c:6574:1::/64")
)

const (
	// DefaultBridge is the node bridge.
	DefaultBridge = "vmlet0"
	// DefaultNetnsDir is where `ip netns add` puts named namespaces.
	DefaultNetnsDir = "/run/netns"
	// DefaultNodeTable is the node's nftables table (family inet).
	DefaultNodeTable = "vmlet_node"
	// podAliasPrefix marks host-side veths vmlet created; the alias records the pod and its
	// address, so the kernel is the only IPAM state and nothing can go stale elsewhere.
	podAliasPrefix = "vmlet-pod "
)

// PodNetwork is the plan (and, once created, the state) of one launcher's pod network.
type PodNetwork struct {
	ID        string
	NetnsPath string           // the launcher's netns, e.g. /run/netns/vmlet-<id>
	HostVeth  string           // host end, a port of the node bridge
	Interface string           // pod end inside the netns: "eth0"
	MAC       net.HardwareAddr // of the pod end, stable per ID
	Addr      netip.Prefix     // the pod address with the node subnet's prefix length
	Gateway   netip.Addr       // the node bridge's address
	Addr6     netip.Prefix     // the pod's IPv6 address (dual-stack nodes only)
	Gateway6  netip.Addr
	MTU       int
	Bridge    string
	// Secondary marks an additional interface of the pod (Node.AddInterface): an address on
	// the node subnet but no routes, like a Multus attachment's.
	Secondary bool
	// Node is the node whose pod holds an interface of a segment that spans nodes
	// (Segment.AddInterface); empty on a node's own bridge.
	Node string
}

var podIDRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// withDefaults fills in the defaults and validates the configuration.
func (c NodeConfig) withDefaults() (NodeConfig, error) {
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultNodeSubnet
	}
	if c.NetnsDir == "" {
		c.NetnsDir = DefaultNetnsDir
	}
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.Table == "" {
		c.Table = DefaultNodeTable
	}
	switch {
	case len(c.Bridge) > 15 || strings.ContainsAny(c.Bridge, "/ \t\n:"):
		return c, fieldErr("bridge", c.Bridge, ErrInvalidSpec, "want an interface name of at most 15 characters")
	case !c.Subnet.Addr().Is4() || c.Subnet.Bits() > 29 || c.Subnet.Bits() < 8 || c.Subnet != c.Subnet.Masked():
		return c, fieldErr("subnet", c.Subnet.String(), ErrInvalidSpec, "want an IPv4 network between /8 and /29")
	case c.Subnet6.IsValid() && (!c.Subnet6.Addr().Is6() || c.Subnet6.Addr().Is4In6() || c.Subnet6.Bits() < 64 || c.Subnet6.Bits() > 120 || c.Subnet6 != c.Subnet6.Masked()):
		return c, fieldErr("subnet6", c.Subnet6.String(), ErrInvalidSpec, "want an IPv6 network between /64 and /120")
	case c.Subnet6.IsValid() && 128-c.Subnet6.Bits() < 32-c.Subnet.Bits():
		return c, fieldErr("subnet6", c.Subnet6.String(), ErrInvalidSpec, "its host part must be at least as large as the IPv4 subnet's")
	case c.MTU < 1280 && c.Subnet6.IsValid(), c.MTU < 576 || c.MTU > 65535:
		return c, fieldErr("mtu", fmt.Sprint(c.MTU), ErrInvalidSpec, "want 576..65535")
	case !filepath.IsAbs(c.NetnsDir):
		return c, fieldErr("netnsDir", c.NetnsDir, ErrInvalidSpec, "want an absolute path")
	case c.NetnsPath != "" && !filepath.IsAbs(c.NetnsPath):
		return c, fieldErr("netnsPath", c.NetnsPath, ErrInvalidSpec, "want an absolute path")
	}
	return c, nil
}

// Gateway is the node bridge's address: the subnet's first address.
func (c NodeConfig) gateway() netip.Prefix {
	return netip.PrefixFrom(c.Subnet.Addr().Next(), c.Subnet.Bits())
}

// gateway6 is the node bridge's IPv6 address, when dual-stack.
func (c NodeConfig) gateway6() netip.Prefix {
	if !c.Subnet6.IsValid() {
		return netip.Prefix{}
	}
	return netip.PrefixFrom(c.Subnet6.Addr().Next(), c.Subnet6.Bits())
}

// addr6 maps a pod's IPv4 address into Subnet6: the same host part.
func (c NodeConfig) addr6(v4 netip.Addr) netip.Prefix {
	if !c.Subnet6.IsValid() {
		return netip.Prefix{}
	}
	n, a := c.Subnet.Addr().As4(), v4.As4()
	host := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(n[0])<<24 | uint32(n[1])<<16 | uint32(n[2])<<8 | uint32(n[3]))
	b := c.Subnet6.Addr().As16()
	for i := 15; i >= 12; i-- {
		b[i] |= byte(host)
		host >>= 8
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), c.Subnet6.Bits())
}

// PlanPod computes the pod network of pod id on a node: names, MAC and the lowest address of
// the subnet not in inUse (nor the network, gateway or broadcast address). Pure.
func PlanPod(cfg NodeConfig, id string, inUse []netip.Addr) (PodNetwork, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return PodNetwork{}, err
	}
	if err := checkPodID(id); err != nil {
		return PodNetwork{}, err
	}
	addr, err := freeAddr(cfg, inUse)
	if err != nil {
		return PodNetwork{}, err
	}
	return podPlan(cfg, id, addr), nil
}

func checkPodID(id string) error {
	if !podIDRE.MatchString(id) {
		return fieldErr("pod id", id, ErrInvalidSpec, "want 1-63 of [a-z0-9._-], starting and ending alphanumeric")
	}
	return nil
}

func podPlan(cfg NodeConfig, id string, addr netip.Addr) PodNetwork {
	return PodNetwork{
		ID:        id,
		NetnsPath: filepath.Join(cfg.NetnsDir, "vmlet-"+id),
		HostVeth:  hostVethName(id),
		Interface: DefaultPodInterface,
		MAC:       GenerateMAC(id, "pod-eth0"),
		Addr:      netip.PrefixFrom(addr, cfg.Subnet.Bits()),
		Gateway:   cfg.gateway().Addr(),
		Addr6:     cfg.addr6(addr),
		Gateway6:  cfg.gateway6().Addr(),
		MTU:       cfg.MTU,
		Bridge:    cfg.Bridge,
	}
}

// hostVethName is "vmh" + 12 hex digits of the pod id's hash: fits IFNAMSIZ for any id.
func hostVethName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "vmh" + hex.EncodeToString(sum[:6])
}

func freeAddr(cfg NodeConfig, inUse []netip.Addr) (netip.Addr, error) {
	used := map[netip.Addr]bool{}
	for _, a := range inUse {
		used[a] = true
	}
	last := lastAddr(cfg.Subnet)
	for a := cfg.gateway().Addr().Next(); a.Less(last) && cfg.Subnet.Contains(a); a = a.Next() {
		if !used[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("allocate pod address in %s: %w", cfg.Subnet, ErrSubnetExhausted)
}

// lastAddr is the broadcast address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// podAlias is the alias of a pod's host veth: "vmlet-pod <id> <addr>/<bits>", followed by
// the pod-side name for a secondary interface and, on a segment, the node of the pod.
func podAlias(p PodNetwork) string {
	s := podAliasPrefix + p.ID + " " + p.Addr.String()
	if p.Secondary {
		s += " " + p.Interface
		if p.Node != "" {
			s += " " + p.Node
		}
	}
	return s
}

// podVeth is a host veth as its alias describes it.
type podVeth struct {
	id     string
	addr   netip.Prefix
	ifname string // the pod side of a secondary interface; "" for the pod's eth0
	node   string // the pod's node, for an interface on a segment (Segment)
}

// parsePodAlias reverses podAlias.
func parsePodAlias(s string) (podVeth, bool) {
	rest, found := strings.CutPrefix(s, podAliasPrefix)
	if !found {
		return podVeth{}, false
	}
	f := strings.Fields(rest)
	if len(f) < 2 || len(f) > 4 {
		return podVeth{}, false
	}
	addr, err := netip.ParsePrefix(f[1])
	if err != nil {
		return podVeth{}, false
	}
	v := podVeth{id: f[0], addr: addr}
	if len(f) >= 3 {
		v.ifname = f[2]
	}
	if len(f) == 4 {
		v.node = f[3]
	}
	return v, true
}

// hostName is the host veth's name this alias belongs on.
func (v podVeth) hostName() string {
	switch {
	case v.ifname == "":
		return hostVethName(v.id)
	case v.node != "":
		return segmentVethName(v.id, v.ifname, v.node)
	}
	return hostVethName(v.id + "/" + v.ifname)
}

// segmentVethName is the host veth of pod id's interface ifname on a segment, for the pod on
// node: the pods of one VMI on two nodes (a migration's source and target) have one each.
func segmentVethName(id, ifname, node string) string {
	return hostVethName(id + "/" + ifname + "@" + node)
}

// secondaryPlan is the plan of pod id's secondary interface ifname with address addr.
func secondaryPlan(cfg NodeConfig, id, ifname string, addr netip.Addr) PodNetwork {
	p := podPlan(cfg, id, addr)
	p.HostVeth = hostVethName(id + "/" + ifname)
	p.Interface = ifname
	p.MAC = GenerateMAC(id, "pod-"+ifname)
	p.Addr6, p.Gateway6 = netip.Prefix{}, netip.Addr{}
	p.Secondary = true
	return p
}

// nodeTable is the node's NAT: pod traffic leaving the pod subnet is masqueraded to the
// node's address on the way out.
func nodeTable(cfg NodeConfig) *Table {
	post := Chain{Name: "postrouting", Type: "nat", Hook: "postrouting", Priority: prioSrcNAT}
	if !cfg.NoMasquerade {
		post.Rules = []Rule{{Saddr: cfg.Subnet, Daddr: cfg.Subnet, NotDaddr: true, Action: ActionMasquerade}}
		if cfg.Subnet6.IsValid() {
			post.Rules = append(post.Rules, Rule{Saddr: cfg.Subnet6, Daddr: cfg.Subnet6, NotDaddr: true, Action: ActionMasquerade})
		}
	}
	return &Table{Family: FamilyInet, Name: cfg.Table, Chains: []Chain{post}}
}
