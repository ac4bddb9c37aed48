package network

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/vishvananda/netlink"
)

// testDNS is handed to guests; nothing ever sends a query to it.
var testDNS = &DNS{Servers: []netip.Addr{netip.MustParseAddr("198.51.100.53")}, Search: []string{"ns1.svc.cluster.local", "cluster.local"}}

func masqSpec(uid string, ports ...Port) *Spec {
	return &Spec{
		UID: uid, Hostname: uid, DNS: testDNS,
		Interfaces: []Interface{{Name: "default", Binding: BindingMasquerade, Ports: ports}},
		Networks:   []Network{{Name: "default", Pod: true}},
	}
}

// attach runs Attach for spec in pod's netns, detached by t.Cleanup.
func attach(t testing.TB, pod PodNetwork, spec *Spec) *Attachment {
	t.Helper()
	a, err := Attach(pod.NetnsPath, spec, AttachOptions{ServeDHCP: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Detach(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return a
}

// TestMasqueradeBinding: a (fake) guest behind the masquerade binding leases 10.0.2.2 with
// the configured options, is reachable from a client through the pod address on the declared
// port only (and sees the client's real address), is reachable from the pod's loopback, and
// reaches a remote host through both masquerades. Applying again changes nothing; Detach
// leaves the pod as CreatePod made it.
func TestMasqueradeBinding(t *testing.T) {
	tn := newTestNode(t)
	clientNS, clientIP := attachHost(t, tn, "client", clientNet)
	remoteNS, remoteIP := attachHost(t, tn, "remote", remoteNet)
	serveGreeting(listenIn(t, remoteNS, ":7001"))
	pod, err := tn.CreatePod("vm-a")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-a")) })
	podLinks, podTables := linkNames(t, pod.NetnsPath), tableNames(t, pod.NetnsPath)

	a := attach(t, pod, masqSpec("vm-a", Port{Port: 8080}))
	ip := a.Plan().Interfaces[0]
	guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
	t.Cleanup(func() { deleteLink(t, pod.NetnsPath, "fg0") })

	lease := dhcpLease(t, guestNS, "guest-says-hi")
	ack := lease.ACK
	checkOptions(t, ack, "10.0.2.2", "10.0.2.1", 24)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.WaitLease(ctx, "default")
	if err != nil || l.Addr != netip.MustParsePrefix("10.0.2.2/24") || l.Hostname != "guest-says-hi" || !slices.Equal(l.MAC, ip.MAC) {
		t.Errorf("WaitLease = %+v, %v", l, err)
	}
	st := a.Status(a.Leases())
	if len(st) != 1 || !slices.Equal(st[0].IPs, []netip.Addr{pod.Addr.Addr()}) || !slices.Equal(st[0].GuestIPs, []netip.Addr{netip.MustParseAddr("10.0.2.2")}) || st[0].PodInterface != "eth0" {
		t.Errorf("Status = %+v", st)
	}

	serveGreeting(listenIn(t, guestNS, ":8080"))
	serveGreeting(listenIn(t, guestNS, ":8081"))
	checkMasqueradeTraffic := func() {
		t.Helper()
		got, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr.Addr(), 8080).String())
		if want := fmt.Sprintf("hello %s\n", clientIP); err != nil || got != want {
			t.Errorf("client -> pod:8080 = %q, %v; want %q (DNAT keeps the client address)", got, err, want)
		}
		if _, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr.Addr(), 8081).String()); !isRefused(err) {
			t.Errorf("client -> pod:8081 (undeclared) = %v, want connection refused by the pod", err)
		}
		got, err = exchange(pod.NetnsPath, "127.0.0.1:8080")
		if err != nil || got != "hello 10.0.2.1\n" {
			t.Errorf("pod loopback -> 127.0.0.1:8080 = %q, %v; want the guest, seeing the gateway", got, err)
		}
		got, err = exchange(guestNS, netip.AddrPortFrom(remoteIP, 7001).String())
		if err != nil || got != "hello 198.51.100.1\n" {
			t.Errorf("guest -> remote = %q, %v; want the node's uplink address", got, err)
		}
	}
	checkMasqueradeTraffic()

	// Idempotent: a second apply (an agent restart) gives the same links and rules.
	links, rules := linkNames(t, pod.NetnsPath), tableNames(t, pod.NetnsPath)
	must(t, ApplyPlan(pod.NetnsPath, a.Plan()))
	if l2, r2 := linkNames(t, pod.NetnsPath), tableNames(t, pod.NetnsPath); !slices.Equal(l2, links) || !slices.Equal(r2, rules) {
		t.Errorf("after a second apply: links %v tables %v; want %v %v", l2, r2, links, rules)
	}
	checkMasqueradeTraffic()

	deleteLink(t, pod.NetnsPath, "fg0")
	must(t, a.Detach())
	if got := linkNames(t, pod.NetnsPath); !slices.Equal(got, podLinks) {
		t.Errorf("pod links after Detach = %v, want %v", got, podLinks)
	}
	if got := tableNames(t, pod.NetnsPath); !slices.Equal(got, podTables) {
		t.Errorf("pod tables after Detach = %v, want %v", got, podTables)
	}
}

// TestMasqueradeAllPorts: without declared ports every port of the pod address reaches the
// guest, as in KubeVirt.
func TestMasqueradeAllPorts(t *testing.T) {
	tn := newTestNode(t)
	clientNS, _ := attachHost(t, tn, "client", clientNet)
	pod, err := tn.CreatePod("vm-all")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-all")) })
	a := attach(t, pod, masqSpec("vm-all"))
	ip := a.Plan().Interfaces[0]
	guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
	t.Cleanup(func() { deleteLink(t, pod.NetnsPath, "fg0") })
	dhcpLease(t, guestNS, "")
	for _, port := range []int{22, 8081, 65535} {
		serveGreeting(listenIn(t, guestNS, fmt.Sprintf(":%d", port)))
		if _, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr.Addr(), uint16(port)).String()); err != nil {
			t.Errorf("client -> pod:%d: %v", port, err)
		}
	}
}

// checkOptions checks an ACK's address and the options every binding hands out.
func checkOptions(t testing.TB, ack *dhcpv4.DHCPv4, addr, router string, bits int) {
	t.Helper()
	if got := ack.YourIPAddr.String(); got != addr {
		t.Errorf("yiaddr = %s, want %s", got, addr)
	}
	if ones, _ := ack.SubnetMask().Size(); ones != bits {
		t.Errorf("mask /%d, want /%d", ones, bits)
	}
	if rs := ack.Router(); len(rs) != 1 || rs[0].String() != router {
		t.Errorf("routers = %v, want %s", rs, router)
	}
	if dns := ack.DNS(); len(dns) != 1 || !dns[0].Equal(net.IP(testDNS.Servers[0].AsSlice())) {
		t.Errorf("dns = %v", dns)
	}
	if s := ack.DomainSearch(); s == nil || !slices.Equal(s.Labels, testDNS.Search) {
		t.Errorf("search = %v", s)
	}
	if mtu := ack.GetOneOption(dhcpv4.OptionInterfaceMTU); len(mtu) != 2 || int(mtu[0])<<8|int(mtu[1]) != 1500 {
		t.Errorf("mtu option = %v", mtu)
	}
	if lt := ack.IPAddressLeaseTime(0); lt != DefaultLeaseTime {
		t.Errorf("lease time = %s", lt)
	}
	if hn := ack.HostName(); hn == "" {
		t.Errorf("no hostname offered")
	}
}

func deleteLink(t testing.TB, ns, name string) {
	t.Helper()
	h, done, err := nsHandle(ns)
	if err != nil {
		return // namespace already gone
	}
	defer done()
	if l, err := h.LinkByName(name); err == nil {
		must(t, h.LinkDel(l))
	}
}

// TestAttachReverts: when a step fails (a foreign link has the tap's name), Attach leaves
// the pod as it found it.
func TestAttachReverts(t *testing.T) {
	tn := newTestNode(t)
	pod, err := tn.CreatePod("vm-r")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-r")) })
	h, done, err := nsHandle(pod.NetnsPath)
	must(t, err)
	defer done()
	must(t, h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "tap0"}, PeerName: "tap0-peer"}))
	links, tables := linkNames(t, pod.NetnsPath), tableNames(t, pod.NetnsPath)
	for _, spec := range []*Spec{masqSpec("vm-r"), bridgeSpec("vm-r")} {
		_, err := Attach(pod.NetnsPath, spec, AttachOptions{ServeDHCP: true})
		if !errors.Is(err, ErrNameCollision) {
			t.Fatalf("Attach %s = %v, want ErrNameCollision", spec.Interfaces[0].Binding, err)
		}
		if got := linkNames(t, pod.NetnsPath); !slices.Equal(got, links) {
			t.Errorf("%s: links after failed Attach = %v, want %v", spec.Interfaces[0].Binding, got, links)
		}
		if got := tableNames(t, pod.NetnsPath); !slices.Equal(got, tables) {
			t.Errorf("%s: tables after failed Attach = %v, want %v", spec.Interfaces[0].Binding, got, tables)
		}
	}
	st, err := Discover(pod.NetnsPath, masqSpec("vm-r"))
	must(t, err)
	if pi := st.Interfaces[0]; pi.Addr != pod.Addr || pi.Gateway != pod.Gateway || !slices.Equal(pi.MAC, pod.MAC) {
		t.Errorf("pod interface after failed bridge Attach = %+v, want %+v", pi, pod)
	}
}
