package dhcp

import (
	"encoding/hex"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

var testDHCP6 = DHCPv6Config{
	Interface: "k6t-eth0", ServerMAC: mustMAC("02:00:00:00:00:01"), ClientMAC: mustMAC("02:00:00:00:00:02"),
	ClientAddr: netip.MustParsePrefix("fd10:0:2::2/120"),
	DNS:        []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")},
	Search:     []string{"svc.cluster.local"}, LeaseTime: time.Hour,
}

func roundTrip6(t *testing.T, m *dhcpv6.Message) *dhcpv6.Message {
	t.Helper()
	d, err := dhcpv6.FromBytes(m.ToBytes())
	must(t, err)
	return d.(*dhcpv6.Message)
}

func TestDHCPv6Reply(t *testing.T) {
	sol, err := dhcpv6.NewSolicit(mustMAC("02:00:00:00:00:02"))
	must(t, err)
	adv, ev := dhcp6Reply(&testDHCP6, roundTrip6(t, sol))
	if adv == nil || adv.Type() != dhcpv6.MessageTypeAdvertise || ev != eventNone {
		t.Fatalf("solicit -> %v, %v; want an advertise", adv, ev)
	}
	adv = roundTrip6(t, adv)
	checkIA := func(m *dhcpv6.Message) {
		t.Helper()
		ia := m.Options.OneIANA()
		if ia == nil || ia.IaId != sol.Options.OneIANA().IaId || ia.Options.OneAddress() == nil ||
			ia.Options.OneAddress().IPv6Addr.String() != "fd10:0:2::2" || ia.Options.OneAddress().ValidLifetime != time.Hour {
			t.Errorf("IA_NA in %s", m.Summary())
		}
		if dns := m.Options.DNS(); len(dns) != 1 || dns[0].String() != "fd00::10" {
			t.Errorf("dns %v: want only the IPv6 server", dns)
		}
		if s := m.Options.DomainSearchList(); s == nil || len(s.Labels) != 1 || s.Labels[0] != "svc.cluster.local" {
			t.Errorf("search %v", s)
		}
	}
	checkIA(adv)
	req, err := dhcpv6.NewRequestFromAdvertise(adv)
	must(t, err)
	reply, ev := dhcp6Reply(&testDHCP6, roundTrip6(t, req))
	if reply == nil || reply.Type() != dhcpv6.MessageTypeReply || ev != eventAcked {
		t.Fatalf("request -> %v, %v; want a reply", reply, ev)
	}
	checkIA(roundTrip6(t, reply))

	rapid, err := dhcpv6.NewSolicit(mustMAC("02:00:00:00:00:02"), dhcpv6.WithRapidCommit)
	must(t, err)
	if r, ev := dhcp6Reply(&testDHCP6, roundTrip6(t, rapid)); r == nil || r.Type() != dhcpv6.MessageTypeReply || ev != eventAcked {
		t.Errorf("rapid-commit solicit -> %v, %v; want a reply", r, ev)
	}
	other, err := dhcpv6.NewRequestFromAdvertise(adv, dhcpv6.WithServerID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mustMAC("02:00:00:00:00:99")}))
	must(t, err)
	if r, _ := dhcp6Reply(&testDHCP6, roundTrip6(t, other)); r != nil {
		t.Errorf("request for another server -> %s; want silence", r.Summary())
	}
	rel := *req
	rel.MessageType = dhcpv6.MessageTypeRelease
	if r, ev := dhcp6Reply(&testDHCP6, roundTrip6(t, &rel)); r == nil || r.Type() != dhcpv6.MessageTypeReply || ev != eventRelease {
		t.Errorf("release -> %v, %v; want a reply and a release", r, ev)
	}
}

// TestRAMessage compares the router advertisement with the bytes RFC 4861 prescribes.
func TestRAMessage(t *testing.T) {
	got := hex.EncodeToString(raMessage(&RAConfig{
		Source: netip.MustParseAddr("fe80::1"), SourceMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1},
		Prefix: netip.MustParsePrefix("fd10:0:2::/120"), MTU: 1450, RouterLifetime: 30 * time.Minute,
	}))
	want := "86000000" + "40c00708" + "00000000" + "00000000" + // RA, csum 0; hop limit 64, M|O, 1800 s; reachable; retrans
		"0101020000000001" + // source link-layer address
		"05010000000005aa" + // MTU 1450
		"0304" + "78" + "80" + "00000708" + "00000708" + "00000000" + "fd100000000200000000000000000000" // on-link fd10:0:2::/120, 1800 s
	if got != want {
		t.Errorf("router advertisement\n got %s\nwant %s", got, want)
	}
}
