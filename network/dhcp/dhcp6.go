package dhcp

import (
	"bytes"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// DHCPv6Config is what the in-process DHCPv6 server hands out on one bridge: one address
// (IA_NA) and the resolver configuration. DHCPv6 carries no routes: the default route and the
// on-link prefix come from router advertisements (RAConfig).
type DHCPv6Config struct {
	Interface  string           // the bridge the server listens on
	ServerMAC  net.HardwareAddr // the server's DUID-LL
	ClientMAC  net.HardwareAddr // the guest's MAC, for lease reports only (DHCPv6 clients are identified by DUID)
	ClientAddr netip.Prefix     // the guest's address and its subnet
	DNS        []netip.Addr
	Search     []string
	LeaseTime  time.Duration
}

// dhcp6Reply computes the server's answer to a DHCPv6 message: the one address to whichever
// client asks (the bridge carries only the guest's tap), with DNS and search list. A nil reply
// means stay silent. Pure.
func dhcp6Reply(cfg *DHCPv6Config, msg *dhcpv6.Message) (*dhcpv6.Message, dhcpEvent) {
	serverID := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: cfg.ServerMAC}
	sid := msg.Options.ServerID()
	if sid != nil && !bytes.Equal(sid.ToBytes(), serverID.ToBytes()) {
		return nil, eventNone // addressed to another server
	}
	if msg.Options.ClientID() == nil || !serverIDAsRequired(msg.Type(), sid != nil) {
		return nil, eventNone
	}
	mods := []dhcpv6.Modifier{dhcpv6.WithServerID(serverID)}
	if dns := dns6(cfg.DNS); len(dns) > 0 {
		mods = append(mods, dhcpv6.WithDNS(dns...))
	}
	if len(cfg.Search) > 0 {
		mods = append(mods, dhcpv6.WithDomainSearchList(cfg.Search...))
	}
	withIA := func() {
		if ia := msg.Options.OneIANA(); ia != nil {
			mods = append(mods, dhcpv6.WithOption(&dhcpv6.OptIANA{
				IaId: ia.IaId, T1: cfg.LeaseTime / 2, T2: cfg.LeaseTime * 4 / 5,
				Options: dhcpv6.IdentityOptions{Options: []dhcpv6.Option{&dhcpv6.OptIAAddress{
					IPv6Addr: net.IP(cfg.ClientAddr.Addr().AsSlice()), PreferredLifetime: cfg.LeaseTime, ValidLifetime: cfg.LeaseTime,
				}}},
			}))
		}
	}
	var (
		reply *dhcpv6.Message
		err   error
		ev    = eventNone
	)
	switch msg.Type() {
	case dhcpv6.MessageTypeSolicit:
		withIA()
		if msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil {
			reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
			ev = eventAcked
		} else {
			reply, err = dhcpv6.NewAdvertiseFromSolicit(msg, mods...)
		}
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRebind:
		withIA()
		reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
		ev = eventAcked
	case dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeInformationRequest:
		reply, err = dhcpv6.NewReplyFromMessage(msg, mods...)
	case dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		reply, err = dhcpv6.NewReplyFromMessage(msg, append(mods, dhcpv6.WithOption(&dhcpv6.OptStatusCode{StatusCode: iana.StatusSuccess}))...)
		ev = eventRelease
	default:
		return nil, eventNone
	}
	if err != nil {
		return nil, eventNone
	}
	return reply, ev
}

// serverIDAsRequired applies RFC 8415's rules for the Server Identifier option (sections 16.2
// to 16.12): Solicit, Confirm and Rebind are discarded with one, Request, Renew, Release and
// Decline without one; Information-request may carry it.
func serverIDAsRequired(t dhcpv6.MessageType, has bool) bool {
	switch t {
	case dhcpv6.MessageTypeSolicit, dhcpv6.MessageTypeConfirm, dhcpv6.MessageTypeRebind:
		return !has
	case dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline:
		return has
	}
	return true
}

func dns6(servers []netip.Addr) []net.IP {
	var out []net.IP
	for _, a := range servers {
		if a.Is6() && !a.Is4In6() {
			out = append(out, net.IP(a.AsSlice()))
		}
	}
	return out
}
