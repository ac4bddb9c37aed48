package network

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
)

func bridgeSpec(uid string) *Spec {
	return &Spec{
		UID: uid, Hostname: uid, DNS: testDNS,
		Interfaces: []Interface{{Name: "default", Binding: BindingBridge}},
		Networks:   []Network{{Name: "default", Pod: true}},
	}
}

// TestBridgeBinding: the (fake) guest takes over the pod's MAC and, by DHCP, the pod's
// address and gateway; a client reaches it at the pod address, it reaches the remote host
// through the node's masquerade; the pod interface holds no address meanwhile; Discover
// still reports the original pod interface; Detach gives the pod its address back.
func TestBridgeBinding(t *testing.T) {
	tn := newTestNode(t)
	clientNS, clientIP := attachHost(t, tn, "client", clientNet)
	remoteNS, remoteIP := attachHost(t, tn, "remote", remoteNet)
	serveGreeting(listenIn(t, remoteNS, ":7001"))
	pod, err := tn.CreatePod("vm-b")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-b")) })
	podLinks := linkNames(t, pod.NetnsPath)
	before, err := Discover(pod.NetnsPath, bridgeSpec("vm-b"))
	must(t, err)

	a := attach(t, pod, bridgeSpec("vm-b"))
	ip := a.Plan().Interfaces[0]
	if !slices.Equal(ip.MAC, pod.MAC) {
		t.Errorf("guest MAC %s, want the pod's %s", ip.MAC, pod.MAC)
	}
	guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
	t.Cleanup(func() { deleteLink(t, pod.NetnsPath, "fg0") })
	lease := dhcpLease(t, guestNS, "")
	checkOptions(t, lease.ACK, pod.Addr.Addr().String(), pod.Gateway.String(), pod.Addr.Bits())
	if st := a.Status(a.Leases()); len(st) != 1 || !slices.Equal(st[0].IPs, []netip.Addr{pod.Addr.Addr()}) {
		t.Errorf("Status = %+v", st)
	}

	h, done, err := nsHandle(pod.NetnsPath)
	must(t, err)
	defer done()
	eth0, err := h.LinkByName("eth0")
	must(t, err)
	if addrs, _ := h.AddrList(eth0, netlink.FAMILY_V4); len(addrs) != 0 || !slices.Equal(eth0.Attrs().HardwareAddr, ip.PodMAC) {
		t.Errorf("pod eth0 keeps %v / MAC %s, want no IPv4 address and MAC %s", addrs, eth0.Attrs().HardwareAddr, ip.PodMAC)
	}
	again, err := Discover(pod.NetnsPath, bridgeSpec("vm-b"))
	must(t, err)
	if fmt.Sprint(again) != fmt.Sprint(before) {
		t.Errorf("Discover after the binding = %+v, want the original %+v", again, before)
	}

	// An agent restart creates the pod again: that must not take the address back.
	if again, err := tn.CreatePod("vm-b"); err != nil || again.Addr != pod.Addr {
		t.Errorf("CreatePod again = %+v, %v", again, err)
	}
	if addrs, _ := h.AddrList(eth0, netlink.FAMILY_V4); len(addrs) != 0 {
		t.Errorf("CreatePod again gave the pod interface %v back", addrs)
	}

	serveGreeting(listenIn(t, guestNS, ":8080"))
	got, err := exchange(clientNS, netip.AddrPortFrom(pod.Addr.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s\n", clientIP); err != nil || got != want {
		t.Errorf("client -> guest at the pod address = %q, %v; want %q", got, err, want)
	}
	got, err = exchange(guestNS, netip.AddrPortFrom(remoteIP, 7001).String())
	if err != nil || got != "hello 198.51.100.1\n" {
		t.Errorf("guest -> remote = %q, %v", got, err)
	}

	deleteLink(t, pod.NetnsPath, "fg0")
	must(t, a.Detach())
	if got := linkNames(t, pod.NetnsPath); !slices.Equal(got, podLinks) {
		t.Errorf("pod links after Detach = %v, want %v", got, podLinks)
	}
	if got := tableNames(t, pod.NetnsPath); len(got) != 0 {
		t.Errorf("pod tables after Detach = %v", got)
	}
	restored, err := Discover(pod.NetnsPath, bridgeSpec("vm-b"))
	must(t, err)
	if fmt.Sprint(restored) != fmt.Sprint(before) {
		t.Errorf("pod interface after Detach = %+v, want %+v", restored, before)
	}
	got, err = exchange(pod.NetnsPath, netip.AddrPortFrom(remoteIP, 7001).String())
	if err != nil || got != "hello 198.51.100.1\n" {
		t.Errorf("pod -> remote after Detach = %q, %v", got, err)
	}
}

// TestReattach: an agent restart (Close without Detach, then Attach again) finds the applied
// state, plans the same (for the bridge binding from the pod interface's recorded state),
// changes no link and serves the guest again.
func TestReattach(t *testing.T) {
	tn := newTestNode(t)
	for _, spec := range []*Spec{bridgeSpec("vm-re"), masqSpec("vm-re", Port{Port: 22})} {
		t.Run(string(spec.Interfaces[0].Binding), func(t *testing.T) {
			pod, err := tn.CreatePod("vm-re")
			must(t, err)
			defer func() { must(t, tn.DeletePod("vm-re")) }()
			a, err := Attach(pod.NetnsPath, spec, AttachOptions{ServeDHCP: true})
			must(t, err)
			must(t, a.Close())
			links := linkNames(t, pod.NetnsPath)
			b := attach(t, pod, spec)
			if got, want := b.Plan().Render(), a.Plan().Render(); got != want {
				t.Errorf("plan after re-attach:\n%s\nwant:\n%s", got, want)
			}
			if got := linkNames(t, pod.NetnsPath); !slices.Equal(got, links) {
				t.Errorf("links after re-attach = %v, want %v", got, links)
			}
			ip := b.Plan().Interfaces[0]
			guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
			defer deleteLink(t, pod.NetnsPath, "fg0")
			lease := dhcpLease(t, guestNS, "")
			if lease.ACK.YourIPAddr.String() != ip.DHCP.ClientAddr.Addr().String() {
				t.Errorf("lease %s, want %s", lease.ACK.YourIPAddr, ip.DHCP.ClientAddr)
			}
			deleteLink(t, pod.NetnsPath, "fg0")
			must(t, b.Detach())
			must(t, removeNetns(guestNS))
		})
	}
}
