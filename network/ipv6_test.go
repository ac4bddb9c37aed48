package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/dhcpv6/nclient6"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestNodeDualStack: with Subnet6 pods get the IPv6 address matching their IPv4 one, reach
// each other over IPv6, and reach the outside through the node's IPv6 masquerade.
func TestNodeDualStack(t *testing.T) {
	tn := newTestNodeWith(t, NodeConfig{Subnet6: DefaultNodeSubnet6})
	remoteNS, _, remote6 := attachHost6(t, tn, "remote", remoteNet, remoteNet6)
	serveGreeting(listenIn(t, remoteNS, "[::]:7001"))
	a, err := tn.CreatePod("pod-a")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("pod-a")) })
	b, err := tn.CreatePod("pod-b")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("pod-b")) })
	if a.Addr6.String() != "fd76:6d6c:6574:1::2/64" || b.Addr6.String() != "fd76:6d6c:6574:1::3/64" || a.Gateway6.String() != "fd76:6d6c:6574:1::1" {
		t.Errorf("pod IPv6: a %s b %s gw %s", a.Addr6, b.Addr6, a.Gateway6)
	}
	serveGreeting(listenIn(t, a.NetnsPath, "[::]:7000"))
	got, err := exchange(b.NetnsPath, netip.AddrPortFrom(a.Addr6.Addr(), 7000).String())
	if want := fmt.Sprintf("hello %s\n", b.Addr6.Addr()); err != nil || got != want {
		t.Errorf("pod b -> pod a over IPv6 = %q, %v; want %q", got, err, want)
	}
	got, err = exchange(a.NetnsPath, netip.AddrPortFrom(remote6, 7001).String())
	if want := "hello 2001:db8:e::1\n"; err != nil || got != want {
		t.Errorf("pod a -> remote over IPv6 = %q, %v; want %q (node masquerade)", got, err, want)
	}
}

// TestMasqueradeDualStack: on a dual-stack pod the (fake) guest learns its default router
// (fe80::1) and on-link prefix from router advertisements, leases fd10:0:2::2 by DHCPv6,
// is reachable through the pod's IPv6 address on the declared port only, and reaches the
// remote host over IPv6 through both masquerades.
func TestMasqueradeDualStack(t *testing.T) {
	tn := newTestNodeWith(t, NodeConfig{Subnet6: DefaultNodeSubnet6})
	clientNS, _, client6 := attachHost6(t, tn, "client", clientNet, clientNet6)
	remoteNS, _, remote6 := attachHost6(t, tn, "remote", remoteNet, remoteNet6)
	serveGreeting(listenIn(t, remoteNS, "[::]:7001"))
	pod, err := tn.CreatePod("vm-6")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-6")) })
	spec := masqSpec("vm-6", Port{Port: 8080})
	spec.DNS = &DNS{Servers: []netip.Addr{netip.MustParseAddr("2001:db8:e::53")}, Search: []string{"cluster.local"}}
	a := attach(t, pod, spec)
	ip := a.Plan().Interfaces[0]
	if ip.DHCP6 == nil || ip.RA == nil {
		t.Fatalf("no IPv6 in the plan of a dual-stack pod:\n%s", a.Plan().Render())
	}
	guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
	t.Cleanup(func() { deleteLink(t, pod.NetnsPath, "fg0") })
	waitRARoute(t, guestNS)

	reply := dhcp6Lease(t, guestNS)
	if dns := reply.Options.DNS(); len(dns) != 1 || dns[0].String() != "2001:db8:e::53" {
		t.Errorf("dhcpv6 dns %v", dns)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if l, err := a.WaitLease6(ctx, "default"); err != nil || l.Addr.String() != "fd10:0:2::2/120" {
		t.Errorf("WaitLease6 = %+v, %v", l, err)
	}

	serveGreeting(listenIn(t, guestNS, "[::]:8080"))
	serveGreeting(listenIn(t, guestNS, "[::]:8081"))
	got, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr6.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s\n", client6); err != nil || got != want {
		t.Errorf("client -> [pod]:8080 = %q, %v; want %q", got, err, want)
	}
	if _, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr6.Addr(), 8081).String()); !isRefused(err) {
		t.Errorf("client -> [pod]:8081 (undeclared) = %v, want connection refused", err)
	}
	got, err = exchange(guestNS, netip.AddrPortFrom(remote6, 7001).String())
	if want := "hello 2001:db8:e::1\n"; err != nil || got != want {
		t.Errorf("guest -> remote over IPv6 = %q, %v; want %q", got, err, want)
	}
	if st := a.Status(a.Leases()); !slices.Contains(st[0].GuestIPs, netip.MustParseAddr("fd10:0:2::2")) {
		t.Errorf("Status = %+v", st)
	}
}

// waitRARoute waits (on netlink route events) until the fake guest has a default route via
// fe80::1 learned from a router advertisement.
func waitRARoute(t testing.TB, guestNS string) {
	t.Helper()
	nsh, err := netns.GetFromPath(guestNS)
	must(t, err)
	defer nsh.Close()
	updates := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	must(t, netlink.RouteSubscribeAt(nsh, updates, done))
	has := func() bool {
		h, hdone, err := nsHandle(guestNS)
		must(t, err)
		defer hdone()
		routes, err := h.RouteList(nil, netlink.FAMILY_V6)
		must(t, err)
		return slices.ContainsFunc(routes, func(r netlink.Route) bool {
			return r.Protocol == unix.RTPROT_RA && r.Gw.Equal(net.ParseIP("fe80::1"))
		})
	}
	deadline := time.After(opTimeout)
	for !has() {
		select {
		case <-updates:
		case <-deadline:
			t.Fatal("no default route from router advertisements in the guest")
		}
	}
}

// dhcp6Lease runs SOLICIT/ADVERTISE/REQUEST/REPLY from the fake guest's eth0 and adds the
// leased address there.
func dhcp6Lease(t testing.TB, guestNS string) *dhcpv6.Message {
	t.Helper()
	var c *nclient6.Client
	err := doInNetns(guestNS, func() error {
		// Not nclient6.New("eth0"): it binds to [fe80::…%eth0], and Go resolves zone names
		// through a process-wide cache that may hold another namespace's eth0 (bind: no
		// such device). A numeric zone is this namespace's index.
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return err
		}
		var ll net.IP
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsLinkLocalUnicast() {
				ll = ipn.IP
			}
		}
		if ll == nil {
			return errors.New("find link-local address of eth0: none")
		}
		conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: ll, Port: dhcpv6.DefaultClientPort, Zone: strconv.Itoa(ifi.Index)})
		if err != nil {
			return err
		}
		c, err = nclient6.NewWithConn(conn, ifi.HardwareAddr, nclient6.WithTimeout(2*time.Second), nclient6.WithRetry(10))
		return err
	})
	must(t, err)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	adv, err := c.Solicit(ctx)
	must(t, err)
	reply, err := c.Request(ctx, adv)
	must(t, err)
	ia := reply.Options.OneIANA()
	if ia == nil || ia.Options.OneAddress() == nil {
		t.Fatalf("no address in %s", reply.Summary())
	}
	addr, _ := netip.AddrFromSlice(ia.Options.OneAddress().IPv6Addr)
	h, done, err := nsHandle(guestNS)
	must(t, err)
	defer done()
	l, err := h.LinkByName("eth0")
	must(t, err)
	must(t, h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(addr, 128)), Flags: unix.IFA_F_NODAD}))
	return reply
}
