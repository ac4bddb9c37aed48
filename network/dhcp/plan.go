package dhcp

// LeasePlan is everything one interface's DHCP service hands out: the DHCPv4 lease and, with
// IPv6, the DHCPv6 lease and the router advertisement. It is a plain value (it round-trips
// through encoding/json) so that the node agent can hand it to the VM's launcher, which
// serves it (ServeLeasePlan) on sockets the agent bound for it (ListenDHCP). Package network
// plans it (InterfacePlan.LeasePlan).
type LeasePlan struct {
	Name  string // the interface's logical name, reported in leases
	DHCP  DHCPConfig
	DHCP6 *DHCPv6Config // nil without IPv6
	RA    *RAConfig     // nil without IPv6
}

// sockets is how many sockets serving p takes: DHCPv4, then DHCPv6 and router
// advertisements with IPv6.
func (p *LeasePlan) sockets() int {
	if p.DHCP6 != nil {
		return 3
	}
	return 1
}
