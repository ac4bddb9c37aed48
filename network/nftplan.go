package network

import "net/netip"

// PodTableName is the nftables table vmlet owns in a launcher's netns.
const PodTableName = "vmlet"

// Chain priorities (nft's dstnat, srcnat and filter).
const (
	prioDstNAT = -100
	prioSrcNAT = 100
	prioFilter = 0
)

var loopback4 = netip.MustParsePrefix("127.0.0.1/32")

// masqueradeTable is the NAT of a masquerade binding, as KubeVirt sets it up:
//   - egress: the guest's address is masqueraded to the pod address on the pod interface;
//   - ingress: declared ports (every port and protocol when none are declared) arriving on
//     the pod interface for the pod address are DNATed to the guest, which sees the real
//     client address;
//   - the same ports on 127.0.0.1 inside the pod reach the guest too (output DNAT plus SNAT
//     to the gateway, so the guest can answer; needs route_localnet on the bridge).
func masqueradeTable(ip *InterfacePlan) *Table {
	pod, guest, gw := ip.Pod.Addr, ip.DHCP.ClientAddr.Addr(), ip.DHCP.ServerAddr
	pre := Chain{Name: "prerouting", Type: "nat", Hook: "prerouting", Priority: prioDstNAT}
	out := Chain{Name: "output", Type: "nat", Hook: "output", Priority: prioDstNAT}
	post := Chain{Name: "postrouting", Type: "nat", Hook: "postrouting", Priority: prioSrcNAT}

	var podHost netip.Prefix
	if pod.IsValid() {
		podHost = netip.PrefixFrom(pod.Addr(), 32)
	}
	in := Rule{IIf: ip.Pod.Name, Daddr: podHost, L3: L3IPv4, Action: ActionDNAT, To: guest}
	lo := Rule{Daddr: loopback4, Action: ActionDNAT, To: guest}
	back := Rule{OIf: ip.Bridge, Saddr: loopback4, Action: ActionSNAT, To: gw}
	if len(ip.Ports) == 0 {
		pre.Rules = append(pre.Rules, in)
		out.Rules = append(out.Rules, lo)
		post.Rules = append(post.Rules, back)
	}
	for _, p := range ip.Ports {
		for _, r := range []struct {
			c    *Chain
			rule Rule
		}{{&pre, in}, {&out, lo}, {&post, back}} {
			r.rule.Proto, r.rule.Dport = p.Protocol, uint16(p.Port)
			r.c.Rules = append(r.c.Rules, r.rule)
		}
	}
	post.Rules = append([]Rule{{OIf: ip.Pod.Name, Saddr: netip.PrefixFrom(guest, 32), Action: ActionMasquerade}}, post.Rules...)

	if ip.GuestAddr6.IsValid() {
		guest6 := ip.GuestAddr6.Addr()
		in6 := Rule{IIf: ip.Pod.Name, Daddr: netip.PrefixFrom(ip.Pod.Addr6.Addr(), 128), Action: ActionDNAT, To: guest6}
		if len(ip.Ports) == 0 {
			pre.Rules = append(pre.Rules, in6)
		}
		for _, p := range ip.Ports {
			r := in6
			r.Proto, r.Dport = p.Protocol, uint16(p.Port)
			pre.Rules = append(pre.Rules, r)
		}
		post.Rules = append(post.Rules, Rule{OIf: ip.Pod.Name, Saddr: netip.PrefixFrom(guest6, 128), Action: ActionMasquerade})
	}
	return &Table{Family: FamilyInet, Name: PodTableName, Chains: []Chain{pre, out, post}}
}

// bridgeTable keeps a bridge binding's DHCP on its own side of the pod interface: the
// in-pod server answers only its guest, and DHCP of other pods on the node's segment never
// reaches it (nor does the guest's reach them).
func bridgeTable(ip *InterfacePlan) *Table {
	pod := ip.Pod.Name
	drop := func(iif, oif string, port uint16) Rule {
		return Rule{L3: L3IPv4, IIf: iif, OIf: oif, Proto: ProtocolUDP, Dport: port, Action: ActionDrop}
	}
	return &Table{Family: FamilyBridge, Name: PodTableName, Chains: []Chain{
		{Name: "input", Type: "filter", Hook: "input", Priority: prioFilter, Rules: []Rule{drop(pod, "", 67)}},
		{Name: "forward", Type: "filter", Hook: "forward", Priority: prioFilter, Rules: []Rule{drop("", pod, 67), drop(pod, "", 68)}},
		{Name: "output", Type: "filter", Hook: "output", Priority: prioFilter, Rules: []Rule{drop("", pod, 68)}},
	}}
}
