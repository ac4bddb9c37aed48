package dhcp

import (
	"net"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
)

// dhcpResult is what a handler decided for one request.
type dhcpResult struct {
	reply []byte
	dst   net.Addr
	event dhcpEvent
	lease Lease // with eventAcked
}

// handleDHCPv4 answers one packet b from peer, as received on the server's socket. Pure.
func handleDHCPv4(cfg *DHCPConfig, name string, b []byte, peer net.Addr, now time.Time) dhcpResult {
	req, err := dhcpv4.FromBytes(b)
	if err != nil {
		return dhcpResult{}
	}
	reply, ev := dhcpReply(cfg, req)
	r := dhcpResult{event: ev}
	if reply != nil {
		r.reply = reply.ToBytes()
		r.dst = &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
		if up, ok := peer.(*net.UDPAddr); ok && !up.IP.IsUnspecified() && up.IP.To4() != nil {
			r.dst = up // a bound client renewing by unicast
		}
	}
	if ev == eventAcked {
		r.lease = Lease{Interface: name, MAC: cfg.ClientMAC, Addr: cfg.ClientAddr, Hostname: req.HostName(), Acked: now, Expires: now.Add(cfg.LeaseTime)}
	}
	return r
}

// handleDHCPv6 answers one packet b from peer, as received on the server's socket. Pure.
func handleDHCPv6(cfg *DHCPv6Config, name string, b []byte, peer net.Addr, now time.Time) dhcpResult {
	d, err := dhcpv6.FromBytes(b)
	if err != nil {
		return dhcpResult{}
	}
	msg, ok := d.(*dhcpv6.Message)
	if !ok {
		return dhcpResult{} // relayed: not on a pod bridge
	}
	reply, ev := dhcp6Reply(cfg, msg)
	r := dhcpResult{event: ev, dst: unzoned(peer)}
	if reply != nil {
		r.reply = reply.ToBytes()
	}
	if ev == eventAcked {
		r.lease = Lease{Interface: name, MAC: cfg.ClientMAC, Addr: cfg.ClientAddr, Acked: now, Expires: now.Add(cfg.LeaseTime)}
	}
	return r
}

// unzoned is a reply's destination without its zone: the socket is bound to the bridge, which
// scopes the client's link-local address. Go names zones through a process-wide cache of one
// namespace's interfaces, and this process serves bridges in many namespaces: a zone name
// from it may stand for another interface's index.
func unzoned(peer net.Addr) net.Addr {
	if ua, ok := peer.(*net.UDPAddr); ok {
		return &net.UDPAddr{IP: ua.IP, Port: ua.Port}
	}
	return peer
}
