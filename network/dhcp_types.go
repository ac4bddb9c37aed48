package network

import "github.com/vmlet/vmlet/network/dhcp"

// The DHCP server lives in package dhcp (which the launcher links without the rest of this
// package); its configuration types are part of the binding plans, under these names.
type (
	// DHCPConfig is dhcp.DHCPConfig: one interface's DHCPv4 lease.
	DHCPConfig = dhcp.DHCPConfig
	// DHCPv6Config is dhcp.DHCPv6Config: one interface's DHCPv6 lease.
	DHCPv6Config = dhcp.DHCPv6Config
	// RAConfig is dhcp.RAConfig: one bridge's router advertisement.
	RAConfig = dhcp.RAConfig
	// StaticRoute is dhcp.StaticRoute: a classless static route (option 121).
	StaticRoute = dhcp.StaticRoute
	// Lease is dhcp.Lease: an address acknowledged to a guest.
	Lease = dhcp.Lease
	// LeasePlan is dhcp.LeasePlan: everything one interface's DHCP service hands out.
	LeasePlan = dhcp.LeasePlan
)

// GatewayLinkLocal is the link-local address of a masquerade binding's bridge when the guest
// has IPv6: the source of its router advertisements and so the guest's default router.
var GatewayLinkLocal = dhcp.GatewayLinkLocal

// LeasePlan is the DHCP part of the interface's plan.
func (ip *InterfacePlan) LeasePlan() LeasePlan {
	return LeasePlan{Name: ip.Name, DHCP: ip.DHCP, DHCP6: ip.DHCP6, RA: ip.RA}
}
