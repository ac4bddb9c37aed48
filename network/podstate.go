package network

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// bridgeAliasPrefix marks a pod interface that a bridge binding took over; the alias keeps
// the interface's original state (address, gateway, MAC, MTU), which the binding moved to the
// guest, so Discover and RemovePlan can still see it.
const bridgeAliasPrefix = "vmlet-bridge"

// bridgeAlias records pi in an interface alias (at most 255 bytes; this is < 200).
func bridgeAlias(pi PodInterface) string {
	s := bridgeAliasPrefix + " mac=" + pi.MAC.String() + " mtu=" + strconv.Itoa(pi.MTU)
	if pi.Addr.IsValid() {
		s += " addr=" + pi.Addr.String()
	}
	if pi.Gateway.IsValid() {
		s += " gw=" + pi.Gateway.String()
	}
	if pi.Addr6.IsValid() {
		s += " addr6=" + pi.Addr6.String()
	}
	if pi.Gateway6.IsValid() {
		s += " gw6=" + pi.Gateway6.String()
	}
	return s
}

// parseBridgeAlias reverses bridgeAlias for interface name.
func parseBridgeAlias(name, s string) (PodInterface, bool) {
	fields := strings.Fields(s)
	if len(fields) == 0 || fields[0] != bridgeAliasPrefix {
		return PodInterface{}, false
	}
	pi := PodInterface{Name: name}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "mac":
			pi.MAC, err = net.ParseMAC(v)
		case "mtu":
			pi.MTU, err = strconv.Atoi(v)
		case "addr":
			pi.Addr, err = netip.ParsePrefix(v)
		case "gw":
			pi.Gateway, err = netip.ParseAddr(v)
		case "addr6":
			pi.Addr6, err = netip.ParsePrefix(v)
		case "gw6":
			pi.Gateway6, err = netip.ParseAddr(v)
		}
		if err != nil {
			return PodInterface{}, false
		}
	}
	return pi, pi.MAC != nil
}

// ParseResolvConf reads nameservers and search domains from a resolv.conf. Loopback servers
// (a local stub resolver such as 127.0.0.53) are dropped: a guest cannot reach the pod's
// loopback. Unknown lines are ignored.
func ParseResolvConf(r io.Reader) (DNS, error) {
	var d DNS
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.HasPrefix(f[0], ";") {
			continue
		}
		switch f[0] {
		case "nameserver":
			a, err := netip.ParseAddr(f[1])
			if err != nil || a.IsLoopback() || a.Zone() != "" {
				continue
			}
			d.Servers = append(d.Servers, a.Unmap())
		case "search":
			d.Search = append(d.Search[:0], f[1:]...)
		case "domain":
			if len(d.Search) == 0 {
				d.Search = []string{f[1]}
			}
		}
	}
	return d, sc.Err()
}
