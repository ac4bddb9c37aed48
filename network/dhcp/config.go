package dhcp

import (
	"net"
	"net/netip"
	"time"
)

// DHCPConfig is what the DHCP server hands out on one bridge: exactly one lease,
// to one MAC.
type DHCPConfig struct {
	Interface  string     // the bridge the server listens on
	ServerAddr netip.Addr // server identifier and source address
	ClientMAC  net.HardwareAddr
	ClientAddr netip.Prefix // address and prefix offered
	Router     netip.Addr   // zero offers no router
	// Routes are classless static routes (option 121), set when the router is outside the
	// client's subnet (then clients must learn a route to it first).
	Routes    []StaticRoute
	DNS       []netip.Addr
	Search    []string
	Hostname  string
	MTU       int
	LeaseTime time.Duration
}

// StaticRoute is a classless static route for DHCP option 121.
type StaticRoute struct {
	Dest    netip.Prefix
	Gateway netip.Addr // 0.0.0.0: on-link
}
