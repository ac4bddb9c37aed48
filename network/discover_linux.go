package network

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
)

// Discover reads the pod interfaces spec's networks use from the launcher's netns at
// netnsPath, and the pod's resolv.conf (spec.ResolvConf, /etc/resolv.conf by default; a
// missing file gives no DNS) unless spec.DNS is set. A pod interface that a bridge binding
// already took over is reported as it was before (from its alias), so planning again gives the
// same plan.
//
// Equivalent to: `ip -n NS addr show eth0; ip -n NS route show default; cat resolv.conf`.
func Discover(netnsPath string, spec *Spec) (*PodState, error) {
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("discover pod: %w", err)
	}
	defer done()
	st := &PodState{}
	seen := map[string]bool{}
	for _, n := range spec.Networks {
		name := PodInterfaceOf(n)
		if seen[name] {
			continue
		}
		seen[name] = true
		pi, err := discoverInterface(h, name)
		if err != nil {
			return nil, fmt.Errorf("discover pod: %w", err)
		}
		st.Interfaces = append(st.Interfaces, pi)
	}
	if spec.DNS == nil {
		path := spec.ResolvConf
		if path == "" {
			path = "/etc/resolv.conf"
		}
		f, err := os.Open(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("discover pod: read resolv.conf: %w", err)
		default:
			st.DNS, err = ParseResolvConf(f)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("discover pod: read resolv.conf: %w", err)
			}
		}
	}
	return st, nil
}

func discoverInterface(h *netlink.Handle, name string) (PodInterface, error) {
	l, err := h.LinkByName(name)
	if err != nil {
		return PodInterface{}, fmt.Errorf("find %s: %w", name, err)
	}
	if pi, ok := parseBridgeAlias(name, l.Attrs().Alias); ok {
		return pi, nil
	}
	pi := PodInterface{Name: name, MAC: l.Attrs().HardwareAddr, MTU: l.Attrs().MTU}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return PodInterface{}, fmt.Errorf("list addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		p, ok := netPrefix(a.IPNet)
		if !ok || !p.Addr().IsGlobalUnicast() {
			continue
		}
		if p.Addr().Is4() && !pi.Addr.IsValid() {
			pi.Addr = p
		}
		if p.Addr().Is6() && !pi.Addr6.IsValid() {
			pi.Addr6 = p
		}
	}
	routes, err := h.RouteList(l, netlink.FAMILY_ALL)
	if err != nil {
		return PodInterface{}, fmt.Errorf("list routes of %s: %w", name, err)
	}
	for _, r := range routes {
		if p, ok := netPrefix(r.Dst); ok && p.Bits() != 0 {
			continue // not a default route
		}
		gw, ok := netip.AddrFromSlice(r.Gw)
		if !ok {
			continue
		}
		gw = gw.Unmap()
		if gw.Is4() && !pi.Gateway.IsValid() {
			pi.Gateway = gw
		}
		if gw.Is6() && !pi.Gateway6.IsValid() {
			pi.Gateway6 = gw
		}
	}
	return pi, nil
}
