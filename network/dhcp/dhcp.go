package dhcp

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// Lease is an address the DHCP server acknowledged to a guest.
type Lease struct {
	Interface string // the interface's logical name
	MAC       net.HardwareAddr
	Addr      netip.Prefix
	Hostname  string // the hostname the client sent (option 12), if any
	Acked     time.Time
	Expires   time.Time
}

// dhcpEvent says what a request did to the lease.
type dhcpEvent int

const (
	eventNone    dhcpEvent = iota
	eventAcked             // an ACK was sent: the guest uses the address
	eventRelease           // the guest released or declined the address
)

// dhcpReply computes the server's answer to req under cfg: one fixed lease for one MAC, as
// KubeVirt's single-client server does. A nil reply means stay silent (a request from another
// client, or for another server, or a message that needs no answer). Pure.
func dhcpReply(cfg *DHCPConfig, req *dhcpv4.DHCPv4) (*dhcpv4.DHCPv4, dhcpEvent) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(req.ClientHWAddr, cfg.ClientMAC) {
		return nil, eventNone
	}
	server := net.IP(cfg.ServerAddr.AsSlice())
	if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(server) {
		return nil, eventNone // the client talks to another server
	}
	var typ dhcpv4.MessageType
	ev := eventNone
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		typ = dhcpv4.MessageTypeOffer
	case dhcpv4.MessageTypeRequest:
		want := req.RequestedIPAddress()
		if want == nil {
			want = req.ClientIPAddr
		}
		if want.Equal(net.IP(cfg.ClientAddr.Addr().AsSlice())) {
			typ, ev = dhcpv4.MessageTypeAck, eventAcked
		} else {
			typ = dhcpv4.MessageTypeNak
		}
	case dhcpv4.MessageTypeInform:
		typ = dhcpv4.MessageTypeAck
	case dhcpv4.MessageTypeRelease, dhcpv4.MessageTypeDecline:
		return nil, eventRelease
	default:
		return nil, eventNone
	}
	reply, err := dhcpv4.NewReplyFromRequest(req,
		dhcpv4.WithMessageType(typ),
		dhcpv4.WithServerIP(server),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(server)),
	)
	if err != nil {
		return nil, eventNone
	}
	if typ == dhcpv4.MessageTypeNak {
		return reply, eventNone
	}
	if req.MessageType() != dhcpv4.MessageTypeInform {
		reply.YourIPAddr = net.IP(cfg.ClientAddr.Addr().AsSlice())
		lease := cfg.LeaseTime
		reply.UpdateOption(dhcpv4.OptIPAddressLeaseTime(lease))
		reply.UpdateOption(dhcpv4.OptRenewTimeValue(lease / 2))
		reply.UpdateOption(dhcpv4.OptRebindingTimeValue(lease * 7 / 8))
	}
	addConfigOptions(cfg, reply)
	return reply, ev
}

// addConfigOptions adds the network configuration: mask, router, routes, DNS, search
// domains, hostname and MTU.
func addConfigOptions(cfg *DHCPConfig, reply *dhcpv4.DHCPv4) {
	reply.UpdateOption(dhcpv4.OptSubnetMask(net.CIDRMask(cfg.ClientAddr.Bits(), 32)))
	if cfg.Router.IsValid() {
		reply.UpdateOption(dhcpv4.OptRouter(net.IP(cfg.Router.AsSlice())))
	}
	if len(cfg.Routes) > 0 {
		var rs []*dhcpv4.Route
		for _, r := range cfg.Routes {
			rs = append(rs, &dhcpv4.Route{Dest: prefixNet(r.Dest), Router: net.IP(r.Gateway.AsSlice())})
		}
		reply.UpdateOption(dhcpv4.OptClasslessStaticRoute(rs...))
	}
	var dns []net.IP
	for _, a := range cfg.DNS {
		if a.Is4() {
			dns = append(dns, net.IP(a.AsSlice()))
		}
	}
	if len(dns) > 0 {
		reply.UpdateOption(dhcpv4.OptDNS(dns...))
	}
	if len(cfg.Search) > 0 {
		reply.UpdateOption(dhcpv4.OptDomainSearch(&rfc1035label.Labels{Labels: cfg.Search}))
		reply.UpdateOption(dhcpv4.OptDomainName(cfg.Search[0]))
	}
	if cfg.Hostname != "" {
		reply.UpdateOption(dhcpv4.OptHostName(cfg.Hostname))
	}
	if cfg.MTU > 0 {
		reply.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionInterfaceMTU, binary.BigEndian.AppendUint16(nil, uint16(cfg.MTU))))
	}
}
