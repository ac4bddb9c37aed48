package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vmlet/vmlet/internal/revert"
)

// EnsureFabric creates the fabric for nodes (PlanFabric), or completes it (idempotent): the
// fabric namespace with its bridge; the uplink veth into UplinkNetns with the uplink address,
// a route to every pod subnet and the NAT table; per node a namespace, a veth from it to the
// bridge with the node's address, a default route via the uplink and a route to every other
// node's pod subnet, with forwarding on. Nodes of an earlier call that are not in nodes are
// left alone (RemoveFabric removes everything). If a step fails, what this call created goes.
//
// Equivalent to: `ip netns add vmlet-fabric; ip -n vmlet-fabric link add fabric type bridge;
// ip link add vmlet-fabric type veth peer uplink netns vmlet-fabric; ip addr add
// 198.19.128.1/24 dev vmlet-fabric; nft -f <table inet vmlet_fabric>`, then per node `ip netns
// add vmlet-node-N; ip -n vmlet-fabric link add vfnXXXX master fabric type veth peer fabric0
// netns vmlet-node-N; ip -n vmlet-node-N addr add ADDR dev fabric0; ip -n vmlet-node-N route
// add default via 198.19.128.1`, and `ip route add POD_SUBNET via NODE_ADDR` for the peers.
func EnsureFabric(cfg FabricConfig, nodes []string) (_ []FabricNode, err error) {
	plan, err := PlanFabric(cfg, nodes)
	if err != nil {
		return nil, err
	}
	cfg, _ = cfg.withDefaults()
	r := revert.New()
	defer r.FailErr(&err)
	fab := cfg.fabricNetns()
	created, err := createNetns(fab)
	if err != nil {
		return nil, fmt.Errorf("ensure fabric: %w", err)
	}
	if created {
		r.AddErr(func() error { return RemoveFabric(cfg) })
	}
	fh, done, err := nsHandle(fab)
	if err != nil {
		return nil, fmt.Errorf("ensure fabric: %w", err)
	}
	defer done()
	br, err := ensureFabricBridge(fh, cfg)
	if err != nil {
		return nil, fmt.Errorf("ensure fabric: %w", err)
	}
	if err := ensureUplink(fh, br, cfg, plan); err != nil {
		return nil, fmt.Errorf("ensure fabric: %w", err)
	}
	for _, n := range plan {
		nsCreated, err := createNetns(n.NetnsPath)
		if err != nil {
			return nil, fmt.Errorf("ensure fabric node %s: %w", n.Name, err)
		}
		if nsCreated && !created {
			r.AddErr(func() error { return removeFabricNode(fh, n.Name, n.NetnsPath) })
		}
		if err := ensureFabricNode(fh, br, cfg, n); err != nil {
			return nil, fmt.Errorf("ensure fabric node %s: %w", n.Name, err)
		}
	}
	r.Success()
	return plan, nil
}

// ensureFabricBridge creates (or finds) the fabric's bridge, up and without an address: the
// fabric is a plain L2 segment.
func ensureFabricBridge(fh *netlink.Handle, cfg FabricConfig) (netlink.Link, error) {
	l, err := fh.LinkByName(fabricBridge)
	if err != nil {
		if !isLinkNotFound(err) {
			return nil, fmt.Errorf("find bridge %s: %w", fabricBridge, err)
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{
			Name: fabricBridge, MTU: cfg.MTU, HardwareAddr: GenerateMAC("vmlet-fabric", cfg.Name),
		}}
		if err := fh.LinkAdd(br); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w", fabricBridge, err)
		}
		if l, err = fh.LinkByName(fabricBridge); err != nil {
			return nil, fmt.Errorf("create bridge %s: %w", fabricBridge, err)
		}
	}
	if err := fh.LinkSetUp(l); err != nil {
		return nil, fmt.Errorf("set bridge %s up: %w", fabricBridge, err)
	}
	return l, nil
}

// ensureUplink connects the fabric to UplinkNetns: a veth whose fabric end is a bridge port,
// whose uplink end has the uplink address and routes to the pod subnets, forwarding on and
// the NAT table. A fresh uplink first checks that Subnet is free there.
func ensureUplink(fh *netlink.Handle, br netlink.Link, cfg FabricConfig, plan []FabricNode) error {
	uh, done, err := nsHandle(cfg.UplinkNetns)
	if err != nil {
		return err
	}
	defer done()
	l, err := uh.LinkByName(cfg.uplink())
	if err == nil && !fabricPeerPresent(fh, fabricUplinkPeer) {
		// A stale uplink from a fabric namespace that is gone: replace it.
		if err := uh.LinkDel(l); err != nil {
			return fmt.Errorf("replace stale uplink %s: %w", cfg.uplink(), err)
		}
		err = netlink.LinkNotFoundError{}
	}
	if err != nil {
		if !isLinkNotFound(err) {
			return fmt.Errorf("find uplink %s: %w", cfg.uplink(), err)
		}
		if err := checkFree(uh, cfg.Subnet); err != nil {
			return err
		}
		if l, err = addVeth(uh, cfg.uplink(), fabricUplinkPeer, cfg.fabricNetns(), cfg.MTU, 0); err != nil {
			return err
		}
	}
	if err := setPortUp(fh, fabricUplinkPeer, br); err != nil {
		return err
	}
	if err := uh.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(cfg.uplinkAddr())}); err != nil {
		return fmt.Errorf("add uplink address %s: %w", cfg.uplinkAddr(), err)
	}
	if err := uh.LinkSetUp(l); err != nil {
		return fmt.Errorf("set uplink %s up: %w", cfg.uplink(), err)
	}
	for _, rt := range uplinkRoutes(plan) {
		if err := replaceRoute(uh, l, rt); err != nil {
			return err
		}
	}
	if err := setSysctl(cfg.UplinkNetns, "net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	return replaceTable(cfg.UplinkNetns, fabricTable(cfg))
}

// ensureFabricNode wires node n (its namespace exists) to the bridge.
func ensureFabricNode(fh *netlink.Handle, br netlink.Link, cfg FabricConfig, n FabricNode) error {
	nh, done, err := nsHandle(n.NetnsPath)
	if err != nil {
		return err
	}
	defer done()
	port := fabricPort(n.Name)
	if _, err := fh.LinkByName(port); err == nil {
		if _, err := nh.LinkByName(n.Link); err != nil {
			// The node's namespace was recreated: its old veth end went with it.
			if err := deleteLinkByName(fh, port); err != nil {
				return err
			}
		}
	}
	if _, err := fh.LinkByName(port); err != nil {
		if _, err := addVeth(fh, port, n.Link, n.NetnsPath, cfg.MTU, br.Attrs().Index); err != nil {
			return err
		}
	}
	if err := setPortUp(fh, port, br); err != nil {
		return err
	}
	l, err := nh.LinkByName(n.Link)
	if err != nil {
		return fmt.Errorf("find %s in node: %w", n.Link, err)
	}
	addr := netip.PrefixFrom(n.Addr, cfg.PodBits)
	if err := nh.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(addr)}); err != nil {
		return fmt.Errorf("add node address %s: %w", addr, err)
	}
	if err := nh.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", n.Link, err)
	}
	def := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: n.Gateway.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))}
	if err := nh.RouteReplace(def); err != nil {
		return fmt.Errorf("add default route via %s: %w", n.Gateway, err)
	}
	for _, rt := range n.Peers {
		if err := replaceRoute(nh, l, rt); err != nil {
			return err
		}
	}
	return setSysctl(n.NetnsPath, "net/ipv4/ip_forward", "1")
}

// addVeth creates veth name in h's namespace with peer in the namespace at peerNS, the host
// end enslaved to master (0: none).
func addVeth(h *netlink.Handle, name, peer, peerNS string, mtu, master int) (netlink.Link, error) {
	ns, err := netns.GetFromPath(peerNS)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", peerNS, err)
	}
	defer ns.Close()
	v := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, MTU: mtu, MasterIndex: master},
		PeerName:      peer,
		PeerMTU:       uint32(mtu),
		PeerNamespace: netlink.NsFd(ns),
	}
	if err := h.LinkAdd(v); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", name, err)
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("create veth %s: %w", name, err)
	}
	return l, nil
}

// setPortUp makes link name a port of br and sets it up.
func setPortUp(h *netlink.Handle, name string, br netlink.Link) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if l.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMaster(l, br); err != nil {
			return fmt.Errorf("add %s to bridge: %w", name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

func replaceRoute(h *netlink.Handle, l netlink.Link, rt FabricRoute) error {
	r := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixNet(rt.Dst), Gw: rt.Via.AsSlice()}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("add route %s via %s: %w", rt.Dst, rt.Via, err)
	}
	return nil
}

// fabricPeerPresent reports whether link name exists in the fabric namespace.
func fabricPeerPresent(fh *netlink.Handle, name string) bool {
	_, err := fh.LinkByName(name)
	return err == nil
}

// checkFree refuses a subnet that overlaps an address or (non-default) route of h's namespace.
func checkFree(h *netlink.Handle, subnet netip.Prefix) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := netPrefix(r.Dst)
		if !ok || p.Bits() == 0 || p.Addr().IsLoopback() {
			continue
		}
		if p.Overlaps(subnet) {
			return fmt.Errorf("check fabric subnet %s: %w: route %s", subnet, ErrSubnetConflict, p)
		}
	}
	return nil
}

func deleteLinkByName(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return nil
	}
	if err := h.LinkDel(l); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// removeFabricNode deletes node's veth (synchronously, before the namespace is unmounted: a
// namespace's links otherwise go whenever the kernel destroys it) and its namespace.
func removeFabricNode(fh *netlink.Handle, node, netnsPath string) error {
	return errors.Join(deleteLinkByName(fh, fabricPort(node)), removeNetns(netnsPath))
}

// RemoveFabric removes everything EnsureFabric made under cfg, whatever nodes it had
// (idempotent): the links of the fabric namespace (which takes the uplink and node veth ends
// and the routes along), the uplink's NAT table, the node namespaces (NAME-node-*) and the
// fabric namespace. Pod namespaces of the nodes are not its business; their veths into a node
// namespace go when it is destroyed.
//
// Equivalent to: `ip -n vmlet-fabric link del …; nft delete table inet vmlet_fabric; ip netns
// delete vmlet-node-…; ip netns delete vmlet-fabric`.
func RemoveFabric(cfg FabricConfig) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return fmt.Errorf("remove fabric: %w", err)
	}
	var errs []error
	fab := cfg.fabricNetns()
	if isNetnsMount(fab) {
		fh, done, err := nsHandle(fab)
		if err != nil {
			return fmt.Errorf("remove fabric: %w", err)
		}
		links, err := fh.LinkList()
		if err != nil {
			errs = append(errs, fmt.Errorf("list fabric links: %w", err))
		}
		for _, l := range links {
			if l.Type() == "veth" {
				if err := fh.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("delete %s: %w", l.Attrs().Name, err))
				}
			}
		}
		errs = append(errs, deleteLinkByName(fh, fabricBridge))
		done()
	}
	if uh, done, err := nsHandle(cfg.UplinkNetns); err == nil {
		// Left by a fabric namespace that went without its links being deleted first.
		errs = append(errs, deleteLinkByName(uh, cfg.uplink()))
		done()
	} else {
		errs = append(errs, err)
	}
	errs = append(errs, deleteTable(cfg.UplinkNetns, FamilyInet, cfg.table()))
	ents, err := os.ReadDir(cfg.NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("list %s: %w", cfg.NetnsDir, err))
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasPrefix(e.Name(), cfg.nodeNetnsPrefix()) {
			errs = append(errs, removeNetns(cfg.NetnsDir+"/"+e.Name()))
		}
	}
	errs = append(errs, removeNetns(fab))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove fabric: %w", err)
	}
	return nil
}
