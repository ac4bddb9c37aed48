package dhcp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"time"
)

// GatewayLinkLocal is the link-local address of a masquerade binding's bridge when the guest
// has IPv6: the source of its router advertisements and so the guest's default router.
var GatewayLinkLocal = netip.MustParsePrefix("fe80::1/64")

// RAConfig is what the router advertisement sender announces on one bridge: "I am your
// default router, get your address by DHCPv6 (managed), this prefix is on-link".
type RAConfig struct {
	Interface      string
	Source         netip.Addr // link-local source, GatewayLinkLocal
	SourceMAC      net.HardwareAddr
	Prefix         netip.Prefix // on-link prefix; not for SLAAC (autonomous flag off)
	MTU            int
	RouterLifetime time.Duration
}

// ICMPv6 router advertisement constants (RFC 4861).
const (
	icmpRouterSolicitation  = 133
	icmpRouterAdvertisement = 134
	raFlagManaged           = 0x80
	raFlagOther             = 0x40
	optSourceLinkAddr       = 1
	optPrefixInfo           = 3
	optMTU                  = 5
	prefixFlagOnLink        = 0x80
)

// raMessage builds the ICMPv6 router advertisement for cfg, checksum zero (the kernel fills
// it in for raw ICMPv6 sockets). Pure.
func raMessage(cfg *RAConfig) []byte {
	b := []byte{icmpRouterAdvertisement, 0, 0, 0, 64, raFlagManaged | raFlagOther}
	b = binary.BigEndian.AppendUint16(b, uint16(min(cfg.RouterLifetime/time.Second, 9000)))
	b = binary.BigEndian.AppendUint32(b, 0) // reachable time: unspecified
	b = binary.BigEndian.AppendUint32(b, 0) // retrans timer: unspecified
	if len(cfg.SourceMAC) == 6 {
		b = append(b, optSourceLinkAddr, 1)
		b = append(b, cfg.SourceMAC...)
	}
	if cfg.MTU > 0 {
		b = append(b, optMTU, 1, 0, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(cfg.MTU))
	}
	if cfg.Prefix.IsValid() {
		life := uint32(cfg.RouterLifetime / time.Second)
		b = append(b, optPrefixInfo, 4, byte(cfg.Prefix.Bits()), prefixFlagOnLink)
		b = binary.BigEndian.AppendUint32(b, life) // valid lifetime
		b = binary.BigEndian.AppendUint32(b, life) // preferred lifetime
		b = binary.BigEndian.AppendUint32(b, 0)    // reserved
		p := cfg.Prefix.Masked().Addr().As16()
		b = append(b, p[:]...)
	}
	return b
}

// isSolicitation reports whether b (an ICMPv6 message as a raw socket delivers it, checksum
// verified by the kernel) is a valid router solicitation (RFC 4861 6.1.1): type 133, code 0,
// at least 8 bytes, and options that each have a non-zero length and fit in the message.
// Anything else is ignored. Pure.
func isSolicitation(b []byte) bool {
	if len(b) < 8 || b[0] != icmpRouterSolicitation || b[1] != 0 {
		return false
	}
	for opts := b[8:]; len(opts) > 0; {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			return false
		}
		opts = opts[int(opts[1])*8:]
	}
	return true
}
