package network

import (
	"fmt"
	"strings"
)

// Render prints the plan for logs and golden tests: per interface the links, addresses, DHCP
// offer and nftables table.
func (p *Plan) Render() string {
	var b strings.Builder
	for _, ip := range p.Interfaces {
		fmt.Fprintf(&b, "interface %s (%s) on pod interface %s (mac %s mtu %d addr %v gw %v addr6 %v)\n",
			ip.Name, ip.Binding, ip.Pod.Name, ip.Pod.MAC, ip.Pod.MTU, opt(ip.Pod.Addr), opt(ip.Pod.Gateway), opt(ip.Pod.Addr6))
		fmt.Fprintf(&b, "  bridge %s mac %v addrs %v\n", ip.Bridge, ip.BridgeMAC, ip.BridgeAddrs)
		fmt.Fprintf(&b, "  tap %s queues %d mtu %d guest mac %s\n", ip.Tap, ip.Queues, ip.MTU, ip.MAC)
		if ip.PodMAC != nil {
			fmt.Fprintf(&b, "  pod interface joins %s with mac %s\n", ip.Bridge, ip.PodMAC)
		}
		if d6 := ip.DHCP6; d6 != nil {
			fmt.Fprintf(&b, "  dhcpv6 on %s as %s: %s dns %v search %v lease %s\n", d6.Interface, d6.ServerMAC, d6.ClientAddr, d6.DNS, d6.Search, d6.LeaseTime)
		}
		if ra := ip.RA; ra != nil {
			fmt.Fprintf(&b, "  router advertisements on %s from %s (%s): managed, on-link %s, mtu %d, lifetime %s\n", ra.Interface, ra.Source, ra.SourceMAC, ra.Prefix, ra.MTU, ra.RouterLifetime)
		}
		fmt.Fprintf(&b, "  sysctl ip_forward=%t ipv6 forwarding=%t route_localnet=%t\n", ip.ForwardIPv4, ip.ForwardIPv6, ip.RouteLocalnet)
		d := ip.DHCP
		fmt.Fprintf(&b, "  dhcp on %s from %s: %s -> %s router %v routes %v dns %v search %v hostname %q mtu %d lease %s\n",
			d.Interface, d.ServerAddr, d.ClientMAC, d.ClientAddr, opt(d.Router), d.Routes, d.DNS, d.Search, d.Hostname, d.MTU, d.LeaseTime)
		if ip.Table != nil {
			for _, line := range strings.SplitAfter(ip.Table.Render(), "\n") {
				if line != "" {
					b.WriteString("  " + line)
				}
			}
		}
	}
	return b.String()
}

// opt prints an unset address or prefix as "-".
func opt(v interface{ IsValid() bool }) any {
	if !v.IsValid() {
		return "-"
	}
	return v
}
