package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ensureBridge creates the node bridge (after checking that the subnet is free) or checks the
// existing one, and makes sure it has the gateway address, is up, forwards, and that the
// node's NAT table is current. It reports whether it created the bridge.
//
// Equivalent to: `ip link add vmlet0 type bridge; ip addr add GW/BITS dev vmlet0; ip link set
// vmlet0 up; sysctl -w net.ipv4.ip_forward=1; nft -f <table inet vmlet_node>`.
func (n *Node) ensureBridge(h *netlink.Handle) (netlink.Link, bool, error) {
	created := false
	l, err := h.LinkByName(n.cfg.Bridge)
	switch {
	case err == nil && l.Type() != "bridge":
		return nil, false, fmt.Errorf("ensure bridge %s: %w: it is a %s", n.cfg.Bridge, ErrNameCollision, l.Type())
	case err != nil && !isLinkNotFound(err):
		return nil, false, fmt.Errorf("ensure bridge %s: %w", n.cfg.Bridge, err)
	case err != nil:
		if err := n.checkSubnet(h); err != nil {
			return nil, false, err
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{
			Name: n.cfg.Bridge,
			MTU:  n.cfg.MTU,
			// A fixed MAC: a bridge without one takes its lowest port MAC, which changes as
			// pods come and go and leaves the pods' neighbour entries for the gateway stale.
			HardwareAddr: GenerateMAC("vmlet-node", n.cfg.Bridge),
		}}
		if err := h.LinkAdd(br); err != nil {
			return nil, false, fmt.Errorf("create bridge %s: %w", n.cfg.Bridge, err)
		}
		created = true
		if l, err = h.LinkByName(n.cfg.Bridge); err != nil {
			return nil, false, errors.Join(fmt.Errorf("create bridge %s: %w", n.cfg.Bridge, err), h.LinkDel(br))
		}
	}
	if err := n.configureBridge(h, l); err != nil {
		if created {
			err = errors.Join(err, n.removeBridge(h))
		}
		return nil, false, err
	}
	if err := reattachPorts(h, l); err != nil {
		if created {
			err = errors.Join(err, n.removeBridge(h))
		}
		return nil, false, err
	}
	return l, created, nil
}

// reattachPorts makes the host ends of pod veths that are no bridge's port (the node bridge
// was deleted under running VMs, and is being made again) ports of br again, so the pods
// reach their gateway and a restarted agent finds them (scan) instead of taking their names
// for another owner's.
//
// Equivalent to: `ip link set vmhXXXX master vmlet0` for each such veth.
func reattachPorts(h *netlink.Handle, br netlink.Link) error {
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		v, ok := parsePodAlias(l.Attrs().Alias)
		if !ok || l.Attrs().Name != v.hostName() || l.Attrs().MasterIndex != 0 || l.Type() != "veth" {
			continue
		}
		if err := h.LinkSetMaster(l, br); err != nil {
			return fmt.Errorf("attach pod veth %s to bridge %s again: %w", l.Attrs().Name, br.Attrs().Name, err)
		}
	}
	return nil
}

func (n *Node) configureBridge(h *netlink.Handle, l netlink.Link) error {
	if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(n.cfg.gateway())}); err != nil {
		return fmt.Errorf("add bridge address %s: %w", n.cfg.gateway(), err)
	}
	if gw6 := n.cfg.gateway6(); gw6.IsValid() {
		if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(gw6), Flags: unix.IFA_F_NODAD}); err != nil {
			return fmt.Errorf("add bridge address %s: %w", gw6, err)
		}
		if err := setSysctl(n.cfg.NetnsPath, "net/ipv6/conf/all/forwarding", "1"); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set bridge %s up: %w", n.cfg.Bridge, err)
	}
	if err := setSysctl(n.cfg.NetnsPath, "net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	return replaceTable(n.cfg.NetnsPath, nodeTable(n.cfg))
}

// removeBridge deletes the bridge and the node's NAT table (missing ones are fine). The
// ip_forward sysctl stays as it is: other software may rely on it.
//
// Equivalent to: `ip link del vmlet0; nft delete table inet vmlet_node`.
func (n *Node) removeBridge(h *netlink.Handle) error {
	if l, err := h.LinkByName(n.cfg.Bridge); err == nil {
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("delete bridge %s: %w", n.cfg.Bridge, err)
		}
	}
	return deleteTable(n.cfg.NetnsPath, FamilyInet, n.cfg.Table)
}

// checkSubnet refuses a node subnet that overlaps an address or a (non-default) route of the
// node that is not the bridge's: traffic for those would be hijacked.
func (n *Node) checkSubnet(h *netlink.Handle) error {
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := netPrefix(r.Dst)
		if !ok || p.Bits() == 0 || p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() || p.Addr().IsMulticast() {
			continue
		}
		for _, s := range []netip.Prefix{n.cfg.Subnet, n.cfg.Subnet6} {
			if s.IsValid() && p.Overlaps(s) {
				return fmt.Errorf("check subnet %s: %w: route %s", s, ErrSubnetConflict, p)
			}
		}
	}
	return nil
}

func isLinkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}

// prefixNet converts a prefix to the *net.IPNet netlink takes, keeping the host bits.
func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}

// netPrefix converts a *net.IPNet (nil: default route) to a prefix.
func netPrefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
