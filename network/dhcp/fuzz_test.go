package dhcp

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// Fuzz targets of the packet handlers (go test ./network/dhcp -run '^$' -fuzz FuzzX -fuzztime 60s):
// arbitrary packets never panic them, only valid requests get replies, and every field of a
// reply comes from the request's echoes or from the plan (testDHCP, testDHCP6), compared with
// bytes written out here by hand.

// wantOptions4 are the plan's DHCPv4 options (testDHCP) as they must appear on the wire.
var wantOptions4 = map[uint8][]byte{
	1:   {255, 255, 255, 0},                        // subnet mask /24
	3:   {10, 0, 2, 1},                             // router
	6:   {10, 96, 0, 10},                           // the IPv4 DNS server only
	12:  []byte("vm1"),                             // hostname
	15:  []byte("svc.cluster.local"),               // domain name
	26:  {0x05, 0xaa},                              // MTU 1450
	51:  {0, 0, 0x0e, 0x10},                        // lease 3600 s
	54:  {10, 0, 2, 1},                             // server identifier
	58:  {0, 0, 0x07, 0x08},                        // renew 1800 s
	59:  {0, 0, 0x0c, 0x4e},                        // rebind 3150 s
	119: []byte("\x03svc\x07cluster\x05local\x00"), // domain search
}

func FuzzDHCPv4(f *testing.F) {
	mac := testDHCP.ClientMAC
	add := func(m *dhcpv4.DHCPv4, err error) {
		must(f, err)
		f.Add(m.ToBytes(), false)
	}
	add(dhcpv4.NewDiscovery(mac, dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte{1, 2, 0, 0, 0, 0, 2}))))
	add(dhcpv4.NewInform(mac, net.IPv4(10, 0, 2, 2)))
	add(dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 2, 2))), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 0, 2, 1))),
		dhcpv4.WithOption(dhcpv4.OptHostName("guest")), dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.OptionRelayAgentInformation, []byte{1, 1, 7}))))
	add(dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 0, 2, 9)))))
	add(dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease)))
	add(dhcpv4.NewDiscovery(mustMAC("02:00:00:00:00:09")))
	f.Add([]byte{1, 1, 6, 0}, true)
	f.Fuzz(func(t *testing.T, b []byte, unicast bool) {
		peer := &net.UDPAddr{IP: net.IPv4zero, Port: 68}
		if unicast {
			peer.IP = net.IPv4(10, 0, 2, 2)
		}
		now := time.Unix(1e9, 0)
		r := handleDHCPv4(&testDHCP, "eth0", b, peer, now)
		if r.reply == nil {
			if r.event == eventAcked {
				t.Fatal("acked without a reply")
			}
			return
		}
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			t.Fatalf("reply to an unparsable packet: %v", err)
		}
		if req.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(req.ClientHWAddr, mac) {
			t.Fatalf("reply to op %v from %v", req.OpCode, req.ClientHWAddr)
		}
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(net.IPv4(10, 0, 2, 1)) {
			t.Fatalf("reply to a request for server %v", sid)
		}
		var wantType dhcpv4.MessageType
		wantEvent := eventNone
		switch req.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			wantType = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeInform:
			wantType = dhcpv4.MessageTypeAck
		case dhcpv4.MessageTypeRequest:
			want := req.RequestedIPAddress()
			if want == nil {
				want = req.ClientIPAddr
			}
			wantType = dhcpv4.MessageTypeNak
			if want.Equal(net.IPv4(10, 0, 2, 2)) {
				wantType, wantEvent = dhcpv4.MessageTypeAck, eventAcked
			}
		default:
			t.Fatalf("reply to a %v", req.MessageType())
		}
		rep, err := dhcpv4.FromBytes(r.reply)
		if err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		switch {
		case rep.MessageType() != wantType || r.event != wantEvent:
			t.Fatalf("%v answered with %v (event %v)", req.MessageType(), rep.MessageType(), r.event)
		case rep.OpCode != dhcpv4.OpcodeBootReply || rep.TransactionID != req.TransactionID || !bytes.Equal(rep.ClientHWAddr, mac):
			t.Fatalf("reply header %s", rep.Summary())
		case !rep.ServerIPAddr.Equal(net.IPv4(10, 0, 2, 1)) || !rep.GatewayIPAddr.Equal(req.GatewayIPAddr):
			t.Fatalf("reply siaddr %v giaddr %v", rep.ServerIPAddr, rep.GatewayIPAddr)
		}
		yi := net.IPv4zero
		if wantType == dhcpv4.MessageTypeOffer || wantEvent == eventAcked {
			yi = net.IPv4(10, 0, 2, 2)
		}
		if !rep.YourIPAddr.Equal(yi) {
			t.Fatalf("yiaddr %v, want %v", rep.YourIPAddr, yi)
		}
		for code, v := range rep.Options {
			switch want, plan := wantOptions4[code]; {
			case code == 53:
			case code == 61 || code == 82: // RFC 6842 and RFC 3046: echoed
				if !bytes.Equal(v, req.Options.Get(dhcpv4.GenericOptionCode(code))) {
					t.Fatalf("option %d %x is not the request's", code, v)
				}
			case !plan:
				t.Fatalf("option %d %x is not in the plan", code, v)
			case wantType == dhcpv4.MessageTypeNak && code != 54:
				t.Fatalf("option %d in a NAK", code)
			case !bytes.Equal(v, want):
				t.Fatalf("option %d = %x, plan says %x", code, v, want)
			}
		}
		if r.event == eventAcked && (r.lease.Addr != testDHCP.ClientAddr || !bytes.Equal(r.lease.MAC, mac) || !r.lease.Expires.Equal(now.Add(time.Hour))) {
			t.Fatalf("lease %+v", r.lease)
		}
		dst := r.dst.(*net.UDPAddr)
		toPeer, broadcast := dst == peer && unicast, dst.IP.Equal(net.IPv4bcast) && dst.Port == 68
		if !toPeer && !broadcast {
			t.Fatalf("reply to %v", dst)
		}
	})
}

// wantServerID6 is RFC 8415's rule for the Server Identifier option per message type
// (1: required, -1: forbidden, 0: optional).
var wantServerID6 = map[dhcpv6.MessageType]int{
	dhcpv6.MessageTypeSolicit: -1, dhcpv6.MessageTypeConfirm: -1, dhcpv6.MessageTypeRebind: -1,
	dhcpv6.MessageTypeRequest: 1, dhcpv6.MessageTypeRenew: 1, dhcpv6.MessageTypeRelease: 1, dhcpv6.MessageTypeDecline: 1,
	dhcpv6.MessageTypeInformationRequest: 0,
}

func FuzzDHCPv6(f *testing.F) {
	mac := testDHCP6.ClientMAC
	sol, err := dhcpv6.NewSolicit(mac)
	must(f, err)
	f.Add(sol.ToBytes())
	rapid, err := dhcpv6.NewSolicit(mac, dhcpv6.WithRapidCommit)
	must(f, err)
	f.Add(rapid.ToBytes())
	adv, _ := dhcp6Reply(&testDHCP6, sol)
	req, err := dhcpv6.NewRequestFromAdvertise(adv)
	must(f, err)
	f.Add(req.ToBytes())
	for _, typ := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline, dhcpv6.MessageTypeInformationRequest} {
		m := *req
		m.MessageType = typ
		f.Add(m.ToBytes())
	}
	reb := *sol
	reb.MessageType = dhcpv6.MessageTypeRebind
	f.Add(reb.ToBytes())
	noSID := *req
	noSID.Options = dhcpv6.MessageOptions{Options: req.Options.Get(dhcpv6.OptionClientID)}
	f.Add(noSID.ToBytes())
	f.Add([]byte{12, 0, 0, 0})
	ours := (&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: testDHCP6.ServerMAC}).ToBytes()
	f.Fuzz(func(t *testing.T, b []byte) {
		now := time.Unix(1e9, 0)
		r := handleDHCPv6(&testDHCP6, "eth0", b, &net.UDPAddr{IP: net.ParseIP("fe80::2"), Port: 546, Zone: "7"}, now)
		if r.reply == nil {
			if r.event == eventAcked {
				t.Fatal("acked without a reply")
			}
			return
		}
		d, err := dhcpv6.FromBytes(b)
		if err != nil {
			t.Fatalf("reply to an unparsable packet: %v", err)
		}
		msg, ok := d.(*dhcpv6.Message)
		if !ok {
			t.Fatal("reply to a relay message")
		}
		cid := msg.Options.ClientID()
		sid := msg.Options.ServerID()
		rule, known := wantServerID6[msg.Type()]
		switch {
		case !known:
			t.Fatalf("reply to a %v", msg.Type())
		case cid == nil:
			t.Fatal("reply to a message without a client id")
		case sid != nil && !bytes.Equal(sid.ToBytes(), ours):
			t.Fatalf("reply to a message for server %v", sid)
		case rule == 1 && sid == nil, rule == -1 && sid != nil:
			t.Fatalf("reply to a %v with server id %v (RFC 8415)", msg.Type(), sid)
		}
		d, err = dhcpv6.FromBytes(r.reply)
		if err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		rep := d.(*dhcpv6.Message)
		isRapid := msg.Type() == dhcpv6.MessageTypeSolicit && msg.GetOneOption(dhcpv6.OptionRapidCommit) != nil
		wantType := dhcpv6.MessageTypeReply
		if msg.Type() == dhcpv6.MessageTypeSolicit && !isRapid {
			wantType = dhcpv6.MessageTypeAdvertise
		}
		if rep.Type() != wantType || rep.TransactionID != msg.TransactionID {
			t.Fatalf("%v answered with %v, xid %v for %v", msg.Type(), rep.Type(), rep.TransactionID, msg.TransactionID)
		}
		for _, o := range rep.Options.Options {
			v := o.ToBytes()
			switch o.Code() {
			case dhcpv6.OptionClientID:
				ok = bytes.Equal(v, cid.ToBytes())
			case dhcpv6.OptionServerID:
				ok = bytes.Equal(v, ours)
			case dhcpv6.OptionDNSRecursiveNameServer:
				ok = bytes.Equal(v, net.ParseIP("fd00::10"))
			case dhcpv6.OptionDomainSearchList:
				ok = bytes.Equal(v, []byte("\x03svc\x07cluster\x05local\x00"))
			case dhcpv6.OptionRapidCommit:
				ok = isRapid
			case dhcpv6.OptionStatusCode:
				ok = msg.Type() == dhcpv6.MessageTypeRelease && bytes.Equal(v, []byte{0, 0})
			case dhcpv6.OptionIANA:
				ia := msg.Options.OneIANA()
				addr := net.ParseIP("fd10:0:2::2")
				want := binary.BigEndian.AppendUint32(nil, 0)
				if ia != nil {
					want = append(ia.IaId[:0:0], ia.IaId[:]...)
				}
				want = append(want, 0, 0, 0x07, 0x08, 0, 0, 0x0b, 0x40) // T1 1800 s, T2 2880 s
				want = append(want, 0, 5, 0, 24)                        // IA address option, 24 bytes
				want = append(want, addr...)
				want = append(want, 0, 0, 0x0e, 0x10, 0, 0, 0x0e, 0x10) // preferred, valid 3600 s
				ok = ia != nil && bytes.Equal(v, want) && msg.Type() != dhcpv6.MessageTypeConfirm &&
					msg.Type() != dhcpv6.MessageTypeInformationRequest && msg.Type() != dhcpv6.MessageTypeRelease
			default:
				ok = false
			}
			if !ok {
				t.Fatalf("%v answered with option %v = %x: not from the plan", msg.Type(), o.Code(), v)
			}
		}
		if r.event == eventAcked && (r.lease.Addr != testDHCP6.ClientAddr || !r.lease.Expires.Equal(now.Add(time.Hour))) {
			t.Fatalf("lease %+v", r.lease)
		}
		if dst := r.dst.(*net.UDPAddr); dst.Zone != "" || !dst.IP.Equal(net.ParseIP("fe80::2")) || dst.Port != 546 {
			t.Fatalf("reply to %v", dst)
		}
	})
}

// FuzzRouterSolicitation: isSolicitation accepts exactly the solicitations RFC 4861 6.1.1
// allows (walked here by option offsets), so no malformed message brings an advertisement.
func FuzzRouterSolicitation(f *testing.F) {
	f.Add([]byte{133, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{133, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 0, 0, 0, 0, 2})
	f.Add([]byte{133, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{133, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 2})
	f.Add([]byte{133, 0, 0, 0, 0, 0, 0, 0, 1, 2, 2, 0, 0, 0, 0, 2})
	f.Add([]byte{133})
	f.Add([]byte{134, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		valid := len(b) >= 8 && b[0] == 133 && b[1] == 0
		off := 8
		for valid && off < len(b) {
			if off+2 > len(b) || b[off+1] == 0 {
				valid = false
				break
			}
			off += 8 * int(b[off+1])
		}
		if valid && off != len(b) && len(b) > 8 {
			valid = false // the last option runs past the end
		}
		if got := isSolicitation(b); got != valid {
			t.Fatalf("isSolicitation(%x) = %v, want %v", b, got, valid)
		}
	})
}

// FuzzRouterAdvertisement: any RAConfig gives an advertisement that decodes back to it (RFC
// 4861 4.2 layout, options in 8-byte units).
func FuzzRouterAdvertisement(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 1}, []byte{0xfd, 0x10, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, byte(120), 1450, int64(1800))
	f.Add([]byte{}, []byte{}, byte(0), 0, int64(0))
	f.Add([]byte{1, 2, 3}, make([]byte, 16), byte(200), -1, int64(1<<40))
	f.Fuzz(func(t *testing.T, mac, prefix []byte, bits byte, mtu int, lifeSec int64) {
		cfg := RAConfig{SourceMAC: mac, MTU: mtu, RouterLifetime: time.Duration(lifeSec) * time.Second}
		if a, ok := netipAddr16(prefix); ok {
			cfg.Prefix = netipPrefix(a, int(bits)%129)
		}
		b := raMessage(&cfg)
		if len(b) < 16 || b[0] != 134 || b[1] != 0 || b[5] != 0xc0 {
			t.Fatalf("header %x", b)
		}
		life := cfg.RouterLifetime / time.Second
		if got := time.Duration(binary.BigEndian.Uint16(b[6:])); life >= 0 && got != min(life, 9000) {
			t.Fatalf("router lifetime %d for %v", got, cfg.RouterLifetime)
		}
		seen := map[byte][]byte{}
		for o := b[16:]; len(o) > 0; {
			if len(o) < 8 || o[1] == 0 || int(o[1])*8 > len(o) {
				t.Fatalf("malformed options %x", o)
			}
			seen[o[0]], o = o[2:int(o[1])*8], o[int(o[1])*8:]
		}
		if v, ok := seen[optSourceLinkAddr]; ok != (len(mac) == 6) || ok && !bytes.Equal(v, mac) {
			t.Fatalf("source link-layer option %x for MAC %x", v, mac)
		}
		if v, ok := seen[optMTU]; ok != (mtu > 0) || ok && binary.BigEndian.Uint32(v[2:]) != uint32(mtu) {
			t.Fatalf("MTU option %x for %d", v, mtu)
		}
		if v, ok := seen[optPrefixInfo]; ok != cfg.Prefix.IsValid() || ok && (int(v[0]) != cfg.Prefix.Bits() || !bytes.Equal(v[14:], cfg.Prefix.Masked().Addr().AsSlice())) {
			t.Fatalf("prefix option %x for %v", v, cfg.Prefix)
		}
	})
}

func netipAddr16(b []byte) (netip.Addr, bool) {
	if len(b) != 16 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom16([16]byte(b)), true
}

func netipPrefix(a netip.Addr, bits int) netip.Prefix { return netip.PrefixFrom(a, bits) }
