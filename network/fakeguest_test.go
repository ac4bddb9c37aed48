package network

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// A fake guest: a netns whose eth0 (with the guest's MAC) is a veth whose other end is a port
// of the binding's in-pod bridge, standing where the tap is. It speaks DHCP with the library's
// client (nclient4, raw sockets), so the binding can be tested without QEMU.

// fakeGuest creates the guest netns and plugs it into bridge br of pod netns podNS.
func fakeGuest(t testing.TB, dir, podNS, br string, mac net.HardwareAddr) string {
	t.Helper()
	guestNS := newNetns(t, dir, "guest-"+br)
	// No duplicate address detection in the fake guest: its link-local address (DHCPv6's
	// source) is usable as soon as the link is up.
	must(t, setSysctl(guestNS, "net/ipv6/conf/default/accept_dad", "0"))
	// A solicitation lost while the bridge port comes up is repeated after 1 s, not 4 s.
	must(t, setSysctl(guestNS, "net/ipv6/conf/default/router_solicitation_interval", "1"))
	h, done, err := nsHandle(podNS)
	must(t, err)
	defer done()
	bl, err := h.LinkByName(br)
	must(t, err)
	peer, closePeer := openNS(t, guestNS)
	defer closePeer()
	v := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{Name: "fg0", MasterIndex: bl.Attrs().Index},
		PeerName:  "eth0", PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(peer),
	}
	must(t, h.LinkAdd(v))
	must(t, h.LinkSetUp(v))
	gh, gdone, err := nsHandle(guestNS)
	must(t, err)
	defer gdone()
	l, err := gh.LinkByName("eth0")
	must(t, err)
	must(t, gh.LinkSetUp(l))
	// The bridge forwards through the port only once it has carrier, which the kernel
	// announces asynchronously: wait for it rather than lose the first DISCOVER.
	waitOperUp(t, podNS, "fg0")
	return guestNS
}

// waitOperUp waits until link name in netns ns is operationally up, on netlink link events.
func waitOperUp(t testing.TB, ns, name string) {
	t.Helper()
	nsh, err := netns.GetFromPath(ns)
	must(t, err)
	defer nsh.Close()
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	must(t, netlink.LinkSubscribeAt(nsh, updates, done)) // subscribe first, then look: no lost event
	h, hdone, err := nsHandle(ns)
	must(t, err)
	defer hdone()
	l, err := h.LinkByName(name)
	must(t, err)
	if l.Attrs().OperState == netlink.OperUp {
		return
	}
	deadline := time.After(opTimeout)
	for {
		select {
		case u := <-updates:
			if u.Attrs().Name == name && u.Attrs().OperState == netlink.OperUp {
				return
			}
		case <-deadline:
			t.Fatalf("%s never came up", name)
		}
	}
}

// dhcpLease runs DISCOVER/OFFER/REQUEST/ACK from the fake guest's eth0 and configures the
// acknowledged address and router there, as udhcpc's script would.
func dhcpLease(t testing.TB, guestNS string, hostname string) *nclient4.Lease {
	t.Helper()
	var c *nclient4.Client
	err := doInNetns(guestNS, func() (err error) {
		c, err = nclient4.New("eth0", nclient4.WithTimeout(2*time.Second), nclient4.WithRetry(10))
		return err
	})
	must(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mods []dhcpv4.Modifier
	if hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(hostname)))
	}
	lease, err := c.Request(ctx, mods...)
	if err != nil {
		t.Fatalf("dhcp in fake guest: %v", err)
	}
	ack := lease.ACK
	addr, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	ones, _ := ack.SubnetMask().Size()
	h, done, err := nsHandle(guestNS)
	must(t, err)
	defer done()
	l, err := h.LinkByName("eth0")
	must(t, err)
	must(t, h.AddrReplace(l, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(addr, ones))}))
	if rs := ack.Router(); len(rs) > 0 {
		must(t, h.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: rs[0]}))
	}
	return lease
}
