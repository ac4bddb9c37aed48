package dhcp

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

var testDHCP = DHCPConfig{
	Interface:  "k6t-eth0",
	ServerAddr: netip.MustParseAddr("10.0.2.1"),
	ClientMAC:  mustMAC("02:00:00:00:00:02"),
	ClientAddr: netip.MustParsePrefix("10.0.2.2/24"),
	Router:     netip.MustParseAddr("10.0.2.1"),
	DNS:        []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::10")},
	Search:     []string{"svc.cluster.local"},
	Hostname:   "vm1",
	MTU:        1450,
	LeaseTime:  time.Hour,
}

// roundTrip sends m through the wire format, as the server sees it.
func roundTrip(t *testing.T, m *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	out, err := dhcpv4.FromBytes(m.ToBytes())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDHCPReply(t *testing.T) {
	mac := testDHCP.ClientMAC
	discover, err := dhcpv4.NewDiscovery(mac)
	must(t, err)
	offer, ev := dhcpReply(&testDHCP, roundTrip(t, discover))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer || ev != eventNone {
		t.Fatalf("discover -> %v, %v; want an offer", offer, ev)
	}
	offer = roundTrip(t, offer)
	if offer.TransactionID != discover.TransactionID || offer.YourIPAddr.String() != "10.0.2.2" ||
		!offer.ServerIdentifier().Equal(net.ParseIP("10.0.2.1")) {
		t.Errorf("offer %s", offer.Summary())
	}
	if dns := offer.DNS(); len(dns) != 1 || dns[0].String() != "10.96.0.10" {
		t.Errorf("dns %v: want only the IPv4 server", dns)
	}
	if offer.HostName() != "vm1" || offer.DomainName() != "svc.cluster.local" || offer.IPAddressLeaseTime(0) != time.Hour ||
		offer.IPAddressRenewalTime(0) != 30*time.Minute {
		t.Errorf("offer options %s", offer.Summary())
	}

	req, err := dhcpv4.NewRequestFromOffer(offer)
	must(t, err)
	ack, ev := dhcpReply(&testDHCP, roundTrip(t, req))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck || ev != eventAcked || ack.YourIPAddr.String() != "10.0.2.2" {
		t.Fatalf("request -> %v, %v; want an ack", ack, ev)
	}

	wrong, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.0.2.9"))))
	must(t, err)
	if nak, ev := dhcpReply(&testDHCP, roundTrip(t, wrong)); nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak || ev != eventNone {
		t.Errorf("request for another address -> %v, %v; want a nak", nak, ev)
	}
	renew, err := dhcpv4.NewRenewFromAck(ack)
	must(t, err)
	if a, ev := dhcpReply(&testDHCP, roundTrip(t, renew)); a == nil || a.MessageType() != dhcpv4.MessageTypeAck || ev != eventAcked {
		t.Errorf("renew (ciaddr) -> %v, %v; want an ack", a, ev)
	}
	other, err := dhcpv4.NewRequestFromOffer(offer, dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.0.2.77"))))
	must(t, err)
	if r, _ := dhcpReply(&testDHCP, roundTrip(t, other)); r != nil {
		t.Errorf("request for another server -> %s; want silence", r.Summary())
	}
	stranger, err := dhcpv4.NewDiscovery(mustMAC("02:00:00:00:00:99"))
	must(t, err)
	if r, _ := dhcpReply(&testDHCP, roundTrip(t, stranger)); r != nil {
		t.Errorf("discover from another MAC -> %s; want silence", r.Summary())
	}
	inform, err := dhcpv4.NewInform(mac, net.ParseIP("10.0.2.2"))
	must(t, err)
	if r, ev := dhcpReply(&testDHCP, roundTrip(t, inform)); r == nil || r.MessageType() != dhcpv4.MessageTypeAck || !r.YourIPAddr.IsUnspecified() || ev != eventNone {
		t.Errorf("inform -> %v, %v; want an ack without address", r, ev)
	}
	rel, err := dhcpv4.NewReleaseFromACK(ack)
	must(t, err)
	if r, ev := dhcpReply(&testDHCP, roundTrip(t, rel)); r != nil || ev != eventRelease {
		t.Errorf("release -> %v, %v; want silence and a release", r, ev)
	}
	if r, _ := dhcpReply(&testDHCP, roundTrip(t, offer)); r != nil {
		t.Errorf("a boot reply -> %s; want silence", r.Summary())
	}
}

// TestDHCPRoutes: with an off-link router the offer carries classless routes (option 121)
// that make the router reachable.
func TestDHCPRoutes(t *testing.T) {
	cfg := testDHCP
	cfg.ClientAddr = netip.MustParsePrefix("10.244.1.7/32")
	cfg.Router = netip.MustParseAddr("169.254.1.1")
	cfg.Routes = []StaticRoute{
		{Dest: netip.MustParsePrefix("169.254.1.1/32"), Gateway: netip.IPv4Unspecified()},
		{Dest: netip.MustParsePrefix("0.0.0.0/0"), Gateway: cfg.Router},
	}
	d, err := dhcpv4.NewDiscovery(cfg.ClientMAC)
	must(t, err)
	offer, _ := dhcpReply(&cfg, d)
	rs := roundTrip(t, offer).ClasslessStaticRoute()
	if len(rs) != 2 || rs[0].Dest.String() != "169.254.1.1/32" || !rs[0].Router.IsUnspecified() ||
		rs[1].Dest.String() != "0.0.0.0/0" || rs[1].Router.String() != "169.254.1.1" {
		t.Errorf("routes %v", rs)
	}
}
