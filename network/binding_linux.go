package network

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/revert"
)

// ApplyPlan builds p in the launcher's network namespace at netnsPath: per interface an
// in-netns bridge and the guest's tap, plus NAT (masquerade) or the pod interface moved into
// the bridge (bridge binding), and the nftables table. It is idempotent (applying the same
// plan again changes nothing) and, if a step fails, removes what it built.
func ApplyPlan(netnsPath string, p *Plan) (err error) {
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return fmt.Errorf("apply network plan: %w", err)
	}
	defer done()
	r := revert.New()
	defer r.FailErr(&err)
	for i := range p.Interfaces {
		ip := &p.Interfaces[i]
		r.AddErr(func() error { return removeInterface(h, netnsPath, ip) })
		if err := applyInterface(h, netnsPath, ip); err != nil {
			return fmt.Errorf("apply network plan: interface %s: %w", ip.Name, err)
		}
	}
	r.Success()
	return nil
}

// applyInterface builds one interface.
//
// Equivalent to (masquerade): `ip link add k6t-eth0 type bridge; ip addr add 10.0.2.1/24 dev
// k6t-eth0; ip tuntap add tap0 mode tap multi_queue vnet_hdr; ip link set tap0 master k6t-eth0
// up; sysctl -w net.ipv4.ip_forward=1; nft -f <table inet vmlet>`; (bridge): the same bridge
// with 169.254.75.10/32, then `ip addr flush dev eth0; ip link set eth0 address NEW master
// k6t-eth0 up; nft -f <table bridge vmlet>`.
func applyInterface(h *netlink.Handle, nsPath string, ip *InterfacePlan) error {
	var pod netlink.Link
	if ip.Binding == BindingBridge {
		// Record the pod interface's state before touching it: a retry, Discover and
		// RemovePlan read it back from the alias.
		var err error
		if pod, err = h.LinkByName(ip.Pod.Name); err != nil {
			return fmt.Errorf("find pod interface: %w", err)
		}
		if _, ok := parseBridgeAlias(ip.Pod.Name, pod.Attrs().Alias); !ok {
			if err := h.LinkSetAlias(pod, bridgeAlias(ip.Pod)); err != nil {
				return fmt.Errorf("record pod interface state: %w", err)
			}
		}
	}
	owner := ownerAlias(ip)
	br, err := ensureLink(h, ip.Bridge, "bridge", owner, func() error {
		return h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: ip.Bridge, MTU: ip.MTU, HardwareAddr: ip.BridgeMAC}})
	})
	if err != nil {
		return err
	}
	for _, a := range ip.BridgeAddrs {
		addr := &netlink.Addr{IPNet: prefixNet(a)}
		if a.Addr().Is6() {
			addr.Flags = unix.IFA_F_NODAD // the gateway must be usable at once
		}
		if err := h.AddrReplace(br, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", a, ip.Bridge, err)
		}
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("set %s up: %w", ip.Bridge, err)
	}
	tap, err := ensureLink(h, ip.Tap, "tuntap", owner, func() error { return createTap(nsPath, ip.Tap) })
	if err != nil {
		return err
	}
	if err := enslave(h, tap, br, ip.MTU); err != nil {
		return err
	}
	if ip.Binding == BindingBridge {
		if err := takeOverPodInterface(h, pod, br, ip); err != nil {
			return err
		}
	}
	if err := applySysctls(nsPath, ip); err != nil {
		return err
	}
	return replaceTable(nsPath, ip.Table)
}

// ownerAlias marks the links a binding creates, so that only those are ever reused or
// deleted: a link of the same name that vmlet did not create is a collision.
func ownerAlias(ip *InterfacePlan) string { return ownerAliasOf(ip.Name) }

// ownerAliasPrefix starts the alias of every link a binding creates.
const ownerAliasPrefix = "vmlet-binding "

// ownerAliasOf is the alias of the links of interface name's binding.
func ownerAliasOf(name string) string { return ownerAliasPrefix + name }

// ensureLink returns link name, creating it with create and marking it with alias owner when
// missing; an existing link without that mark (or of another type) is a collision.
func ensureLink(h *netlink.Handle, name, typ, owner string, create func() error) (netlink.Link, error) {
	l, err := h.LinkByName(name)
	if err == nil {
		if l.Type() != typ || l.Attrs().Alias != owner {
			return nil, fmt.Errorf("ensure %s %s: %w: existing %s with alias %q", typ, name, ErrNameCollision, l.Type(), l.Attrs().Alias)
		}
		return l, nil
	}
	if !isLinkNotFound(err) {
		return nil, fmt.Errorf("ensure %s %s: %w", typ, name, err)
	}
	if err := create(); err != nil {
		return nil, fmt.Errorf("create %s %s: %w", typ, name, err)
	}
	if l, err = h.LinkByName(name); err != nil {
		return nil, fmt.Errorf("create %s %s: %w", typ, name, err)
	}
	if err := h.LinkSetAlias(l, owner); err != nil {
		return nil, errors.Join(fmt.Errorf("mark %s %s: %w", typ, name, err), h.LinkDel(l))
	}
	return l, nil
}

// enslave sets l's MTU, makes it a port of br and sets it up.
func enslave(h *netlink.Handle, l, br netlink.Link, mtu int) error {
	name := l.Attrs().Name
	if l.Attrs().MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set %s mtu %d: %w", name, mtu, err)
		}
	}
	if l.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMasterByIndex(l, br.Attrs().Index); err != nil {
			return fmt.Errorf("attach %s to %s: %w", name, br.Attrs().Name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// takeOverPodInterface hands the pod interface's address to the guest: it drops the pod
// address (and with it the default route), gives the interface a new MAC (the guest takes
// the old one) and makes it a bridge port.
func takeOverPodInterface(h *netlink.Handle, pod, br netlink.Link, ip *InterfacePlan) error {
	if ip.Pod.Addr.IsValid() {
		addrs, err := h.AddrList(pod, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("list pod addresses: %w", err)
		}
		for _, a := range addrs {
			if p, ok := netPrefix(a.IPNet); ok && p == ip.Pod.Addr {
				if err := h.AddrDel(pod, &a); err != nil {
					return fmt.Errorf("remove pod address %s: %w", p, err)
				}
			}
		}
	}
	if !bytes.Equal(pod.Attrs().HardwareAddr, ip.PodMAC) {
		if err := h.LinkSetDown(pod); err != nil {
			return fmt.Errorf("set %s down: %w", ip.Pod.Name, err)
		}
		if err := h.LinkSetHardwareAddr(pod, ip.PodMAC); err != nil {
			return fmt.Errorf("set %s mac: %w", ip.Pod.Name, err)
		}
	}
	return enslave(h, pod, br, ip.MTU)
}

func applySysctls(nsPath string, ip *InterfacePlan) error {
	if ip.ForwardIPv4 {
		if err := setSysctl(nsPath, "net/ipv4/ip_forward", "1"); err != nil {
			return err
		}
	}
	if ip.RouteLocalnet {
		if err := setSysctl(nsPath, "net/ipv4/conf/"+ip.Bridge+"/route_localnet", "1"); err != nil {
			return err
		}
	}
	if ip.ForwardIPv6 {
		if err := setSysctl(nsPath, "net/ipv6/conf/all/forwarding", "1"); err != nil {
			return err
		}
	}
	return nil
}

// RemovePlan undoes ApplyPlan (idempotent: missing parts are fine): taps, bridges and tables
// go, and a bridge binding's pod interface gets its address, MAC and default route back.
// Sysctls stay. Removing the launcher's netns (Node.DeletePod) removes all of it as well.
func RemovePlan(netnsPath string, p *Plan) error {
	if netnsPath != "" {
		if _, err := os.Stat(netnsPath); errors.Is(err, os.ErrNotExist) {
			return nil // the netns is gone, and everything in it
		}
	}
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return fmt.Errorf("remove network plan: %w", err)
	}
	defer done()
	for i := range p.Interfaces {
		if err := removeInterface(h, netnsPath, &p.Interfaces[i]); err != nil {
			return fmt.Errorf("remove network plan: interface %s: %w", p.Interfaces[i].Name, err)
		}
	}
	return nil
}

// removeInterface removes one interface's tap, bridge and table and restores the pod
// interface of a bridge binding.
//
// Equivalent to: `ip link del tap0; ip link del k6t-eth0; nft delete table ...` (+ `ip link
// set eth0 address OLD up; ip addr add ADDR dev eth0; ip route add default via GW`).
func removeInterface(h *netlink.Handle, nsPath string, ip *InterfacePlan) error {
	for _, name := range []string{ip.Tap, ip.Bridge} {
		if l, err := h.LinkByName(name); err == nil && l.Attrs().Alias == ownerAlias(ip) {
			if err := h.LinkDel(l); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
		}
	}
	if ip.Table != nil {
		if err := deleteTable(nsPath, ip.Table.Family, ip.Table.Name); err != nil {
			return err
		}
	}
	if ip.Binding == BindingBridge {
		return restorePodInterface(h, ip.Pod)
	}
	return nil
}

// restorePodInterface gives a bridge binding's pod interface back its recorded state.
func restorePodInterface(h *netlink.Handle, want PodInterface) error {
	l, err := h.LinkByName(want.Name)
	if err != nil {
		return nil // gone with its netns: nothing to restore
	}
	if _, ok := parseBridgeAlias(want.Name, l.Attrs().Alias); !ok {
		return nil // never taken over
	}
	if !bytes.Equal(l.Attrs().HardwareAddr, want.MAC) {
		if err := h.LinkSetDown(l); err != nil {
			return fmt.Errorf("set %s down: %w", want.Name, err)
		}
		if err := h.LinkSetHardwareAddr(l, want.MAC); err != nil {
			return fmt.Errorf("restore %s mac: %w", want.Name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", want.Name, err)
	}
	if want.Addr.IsValid() {
		if err := h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(want.Addr)}); err != nil {
			return fmt.Errorf("restore %s address: %w", want.Name, err)
		}
	}
	if want.Gateway.IsValid() {
		def := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: want.Gateway.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))}
		if err := h.RouteReplace(def); err != nil {
			return fmt.Errorf("restore default route: %w", err)
		}
	}
	if err := h.LinkSetAlias(l, ""); err != nil {
		return fmt.Errorf("clear %s alias: %w", want.Name, err)
	}
	return nil
}
