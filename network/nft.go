package network

import (
	"fmt"
	"net/netip"
	"strings"
)

// Table is one nftables table owned by vmlet, as plain data: Render prints it the way
// `nft list table` does (for golden tests and logs), the apply side compiles it to netlink
// expressions and replaces the whole table in one transaction.
type Table struct {
	Family Family
	Name   string
	Chains []Chain
}

// Family is an nftables table family.
type Family string

// Table families vmlet uses.
const (
	FamilyInet   Family = "inet"   // IPv4 and IPv6: NAT
	FamilyBridge Family = "bridge" // frames crossing a Linux bridge: DHCP isolation
)

// Chain is a base chain with its hook.
type Chain struct {
	Name     string
	Type     string // "nat" or "filter"
	Hook     string // "prerouting", "input", "forward", "output", "postrouting"
	Priority int    // -100 dstnat, 100 srcnat, 0 filter
	Rules    []Rule
}

// L3 is a network protocol match.
type L3 string

// Network protocols a rule may match.
const (
	L3Any  L3 = ""
	L3IPv4 L3 = "ip"
	L3IPv6 L3 = "ip6"
)

// Action is what a matching rule does.
type Action string

// Rule actions.
const (
	ActionMasquerade Action = "masquerade"
	ActionDNAT       Action = "dnat"
	ActionSNAT       Action = "snat"
	ActionDrop       Action = "drop"
	ActionAccept     Action = "accept"
)

// Rule is a conjunction of matches, a counter and an action. Zero fields match anything.
type Rule struct {
	L3       L3 // must agree with the addresses; required for Proto/Dport in the bridge family
	IIf, OIf string
	Saddr    netip.Prefix
	Daddr    netip.Prefix
	NotDaddr bool // match daddr != Daddr
	Proto    Protocol
	Dport    uint16
	Action   Action
	To       netip.Addr // DNAT/SNAT target
}

// Render prints the table in `nft list table` syntax.
func (t *Table) Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n", t.Family, t.Name)
	for i, c := range t.Chains {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %d; policy accept;\n", c.Name, c.Type, c.Hook, c.Priority)
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r.String())
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func (r Rule) String() string {
	var p []string
	if r.IIf != "" {
		p = append(p, fmt.Sprintf("iifname %q", r.IIf))
	}
	if r.OIf != "" {
		p = append(p, fmt.Sprintf("oifname %q", r.OIf))
	}
	l3 := r.l3()
	if r.Saddr.IsValid() {
		p = append(p, fmt.Sprintf("%s saddr %s", l3, prefixString(r.Saddr)))
	}
	if r.Daddr.IsValid() {
		op := ""
		if r.NotDaddr {
			op = "!= "
		}
		p = append(p, fmt.Sprintf("%s daddr %s%s", l3, op, prefixString(r.Daddr)))
	}
	if !r.Saddr.IsValid() && !r.Daddr.IsValid() && r.Proto == "" && l3 != L3Any {
		p = append(p, "meta nfproto "+map[L3]string{L3IPv4: "ipv4", L3IPv6: "ipv6"}[l3])
	}
	if r.Proto != "" {
		proto := strings.ToLower(string(r.Proto))
		if r.Dport != 0 {
			p = append(p, fmt.Sprintf("%s dport %d", proto, r.Dport))
		} else {
			p = append(p, "meta l4proto "+proto)
		}
	}
	p = append(p, "counter")
	switch r.Action {
	case ActionDNAT, ActionSNAT:
		p = append(p, fmt.Sprintf("%s %s to %s", r.Action, l3, r.To))
	default:
		p = append(p, string(r.Action))
	}
	return strings.Join(p, " ")
}

// l3 is the rule's network protocol: explicit, or implied by its addresses.
func (r Rule) l3() L3 {
	if r.L3 != L3Any {
		return r.L3
	}
	for _, a := range []netip.Addr{r.Saddr.Addr(), r.Daddr.Addr(), r.To} {
		if a.IsValid() {
			if a.Is4() {
				return L3IPv4
			}
			return L3IPv6
		}
	}
	return L3Any
}

// prefixString prints a host prefix as a bare address, as nft does.
func prefixString(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}
