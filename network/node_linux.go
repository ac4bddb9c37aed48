package network

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/revert"
)

// Node is the local-mode pod network of one node: a bridge, NAT to the outside and one
// netns + veth per launcher. The kernel is its only state (pod veths carry their pod id and
// address in their alias), so a restarted agent picks up where it left off. Methods are safe
// for concurrent use within one process; one process per node should manage it.
type Node struct {
	cfg NodeConfig
	mu  sync.Mutex
	// tag is the node a Segment's secondary interfaces belong to; empty for a node's own
	// bridge.
	tag string
}

// NewNode validates cfg and fills in its defaults. It changes nothing on the host.
func NewNode(cfg NodeConfig) (*Node, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("new node network: %w", err)
	}
	return &Node{cfg: cfg}, nil
}

// Config returns the configuration with defaults filled in.
func (n *Node) Config() NodeConfig { return n.cfg }

// CreatePod creates pod id's network, or completes and returns it if it exists (idempotent):
// the node bridge and NAT when missing, a netns, a veth whose host end is a bridge port and
// whose pod end is eth0 in the netns with the next free address of the subnet and a default
// route via the bridge. If a step fails, what this call created is removed again.
//
// Equivalent to: `ip netns add vmlet-ID; ip link add vmhXXXX master vmlet0 type veth peer
// eth0 netns vmlet-ID; ip -n vmlet-ID addr add ADDR dev eth0; ip -n vmlet-ID route add default
// via GW` (plus the bridge and `nft` table on first use).
func (n *Node) CreatePod(id string) (_ PodNetwork, err error) {
	if err := checkPodID(id); err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	defer done()
	r := revert.New()
	defer r.FailErr(&err)

	br, created, err := n.ensureBridge(h)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	if created {
		r.AddErr(func() error { return n.removeBridge(h) })
	}
	pods, used, err := n.scan(h, br)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	pod, exists := pods[id]
	if !exists {
		if pod, err = PlanPod(n.cfg, id, used); err != nil {
			return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
		}
	}
	nsCreated, err := createNetns(pod.NetnsPath)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	if nsCreated {
		r.AddErr(func() error { return removeNetns(pod.NetnsPath) })
	}
	if err := n.ensureVeth(h, br, pod, exists, r); err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	if err := configurePodSide(pod); err != nil {
		return PodNetwork{}, fmt.Errorf("create pod %s: %w", id, err)
	}
	r.Success()
	return pod, nil
}

// ensureVeth creates the pod's veth pair unless a complete one exists. A host end whose peer
// is not in the pod's current netns (the netns was recreated) is replaced.
func (n *Node) ensureVeth(h *netlink.Handle, br netlink.Link, pod PodNetwork, exists bool, r *revert.Reverter) error {
	if l, err := h.LinkByName(pod.HostVeth); err == nil {
		switch {
		case !exists && (l.Attrs().Alias != "" || !podSideExists(pod)):
			return fmt.Errorf("create veth %s: %w (alias %q)", pod.HostVeth, ErrNameCollision, l.Attrs().Alias)
		case !exists:
			// No alias, its peer in the pod's netns: made by a CreatePod that was stopped (an
			// agent killed) before it set the alias, which the kernel does not take at
			// creation. Ours, unfinished: made again below.
		case podSideExists(pod):
			return h.LinkSetUp(l)
		}
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("replace stale veth %s: %w", pod.HostVeth, err)
		}
	}
	ns, err := netns.GetFromPath(pod.NetnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", pod.NetnsPath, err)
	}
	defer ns.Close()
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name:        pod.HostVeth,
			MTU:         pod.MTU,
			MasterIndex: br.Attrs().Index,
		},
		PeerName:         pod.Interface,
		PeerHardwareAddr: pod.MAC,
		PeerMTU:          uint32(pod.MTU),
		PeerNamespace:    netlink.NsFd(ns),
	}
	if err := h.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s: %w", pod.HostVeth, err)
	}
	r.AddErr(func() error { return h.LinkDel(veth) })
	// The kernel ignores IFLA_IFALIAS when creating a link: set it afterwards.
	if err := h.LinkSetAlias(veth, podAlias(pod)); err != nil {
		return fmt.Errorf("set %s alias: %w", pod.HostVeth, err)
	}
	if err := h.LinkSetUp(veth); err != nil {
		return fmt.Errorf("set %s up: %w", pod.HostVeth, err)
	}
	return nil
}

// podSideExists reports whether the pod end of the veth is in the pod's netns.
func podSideExists(pod PodNetwork) bool {
	h, done, err := nsHandle(pod.NetnsPath)
	if err != nil {
		return false
	}
	defer done()
	l, err := h.LinkByName(pod.Interface)
	return err == nil && l.Type() == "veth"
}

// configurePodSide gives the pod end its address and default route and sets it up, unless a
// bridge binding has taken it over (its address now belongs to the guest).
func configurePodSide(pod PodNetwork) error {
	h, done, err := nsHandle(pod.NetnsPath)
	if err != nil {
		return err
	}
	defer done()
	l, err := h.LinkByName(pod.Interface)
	if err != nil {
		return fmt.Errorf("find %s in pod: %w", pod.Interface, err)
	}
	if _, taken := parseBridgeAlias(pod.Interface, l.Attrs().Alias); taken {
		return nil
	}
	if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(pod.Addr)}); err != nil {
		return fmt.Errorf("add pod address %s: %w", pod.Addr, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", pod.Interface, err)
	}
	if pod.Secondary {
		return nil // no routes: the pod's default route stays on eth0
	}
	def := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: pod.Gateway.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))}
	if err := h.RouteReplace(def); err != nil {
		return fmt.Errorf("add default route via %s: %w", pod.Gateway, err)
	}
	if !pod.Addr6.IsValid() {
		return nil
	}
	if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(pod.Addr6), Flags: unix.IFA_F_NODAD}); err != nil {
		return fmt.Errorf("add pod address %s: %w", pod.Addr6, err)
	}
	def6 := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: pod.Gateway6.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("::/0"))}
	if err := h.RouteReplace(def6); err != nil {
		return fmt.Errorf("add default route via %s: %w", pod.Gateway6, err)
	}
	return nil
}

// DeletePod removes pod id's veth and netns (idempotent: missing parts are fine). Other pods
// are untouched; when no pod is left, the bridge and the node's NAT table go too.
//
// Equivalent to: `ip link del vmhXXXX; ip netns delete vmlet-ID` (and `ip link del vmlet0;
// nft delete table inet vmlet_node` after the last pod).
func (n *Node) DeletePod(id string) error {
	if err := checkPodID(id); err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	defer done()
	if l, err := h.LinkByName(hostVethName(id)); err == nil {
		if v, ok := parsePodAlias(l.Attrs().Alias); !ok || v.id != id {
			return fmt.Errorf("delete pod %s: %w: %s has alias %q", id, ErrNameCollision, l.Attrs().Name, l.Attrs().Alias)
		}
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("delete pod %s: delete veth: %w", id, err)
		}
	}
	if err := deleteSecondaries(h, id, "", ""); err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	if err := removeNetns(filepath.Join(n.cfg.NetnsDir, "vmlet-"+id)); err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	br, err := h.LinkByName(n.cfg.Bridge)
	if err != nil {
		return nil // no bridge: nothing shared left
	}
	ports, err := bridgePorts(h, br)
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", id, err)
	}
	if len(ports) == 0 {
		if err := n.removeBridge(h); err != nil {
			return fmt.Errorf("delete pod %s: %w", id, err)
		}
	}
	return nil
}

// Pods returns the pods that exist on the node, by address.
func (n *Node) Pods() ([]PodNetwork, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	defer done()
	br, err := h.LinkByName(n.cfg.Bridge)
	if err != nil {
		return nil, nil
	}
	pods, _, err := n.scan(h, br)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []PodNetwork
	for _, p := range pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr.Addr().Less(out[j].Addr.Addr()) })
	return out, nil
}

// scan reads the pods from the aliases of the bridge's ports, and the addresses in use (those
// of secondary interfaces included).
func (n *Node) scan(h *netlink.Handle, br netlink.Link) (map[string]PodNetwork, []netip.Addr, error) {
	ports, err := bridgePorts(h, br)
	if err != nil {
		return nil, nil, err
	}
	pods := map[string]PodNetwork{}
	var used []netip.Addr
	for _, l := range ports {
		v, ok := parsePodAlias(l.Attrs().Alias)
		if !ok || l.Attrs().Name != v.hostName() {
			continue
		}
		used = append(used, v.addr.Addr())
		if v.ifname == "" {
			pods[v.id] = podPlan(n.cfg, v.id, v.addr.Addr())
		}
	}
	return pods, used, nil
}

// bridgePorts lists the links enslaved to br.
func bridgePorts(h *netlink.Handle, br netlink.Link) ([]netlink.Link, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var ports []netlink.Link
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports = append(ports, l)
		}
	}
	return ports, nil
}
