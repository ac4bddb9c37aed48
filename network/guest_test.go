package network

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGuestMasquerade is the end-to-end check with the real test guest under QEMU: two pods
// on the node (one running the VM behind the masquerade binding, one plain) get different
// addresses; the guest's udhcpc leases 10.0.2.2 from the in-process DHCP server (the lease
// callback fires); a client reaches the guest's HTTP service through the pod address on the
// declared port, and the guest sees the client's real address; an undeclared port is refused
// by the pod; the guest reaches the plain pod (source: its pod address) and a remote host
// (source: the node's uplink address). Everything is removed afterwards.
func TestGuestMasquerade(t *testing.T) {
	tn := newTestNode(t)
	clientNS, clientIP := attachHost(t, tn, "client", clientNet)
	remoteNS, remoteIP := attachHost(t, tn, "remote", remoteNet)
	serveGreeting(listenIn(t, remoteNS, ":7001"))
	vmPod, err := tn.CreatePod("vm-masq")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-masq")) })
	plain, err := tn.CreatePod("plain")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("plain")) })
	if vmPod.Addr == plain.Addr {
		t.Fatalf("two pods share %s", vmPod.Addr)
	}
	serveGreeting(listenIn(t, plain.NetnsPath, ":7002"))

	leases := make(chan Lease, 8)
	a, err := Attach(vmPod.NetnsPath, masqSpec("vm-masq", Port{Port: 8080}), AttachOptions{ServeDHCP: true, OnLease: func(l Lease) { leases <- l }})
	must(t, err)
	t.Cleanup(func() { must(t, a.Detach()) })
	g := startGuest(t, a, "default")

	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	select {
	case l := <-leases:
		if l.Addr != netip.MustParsePrefix("10.0.2.2/24") || l.Interface != "default" {
			t.Errorf("lease callback got %+v", l)
		}
	case <-ctx.Done():
		t.Fatalf("no DHCP lease: %v", ctx.Err())
	}
	if got := g.waitIP(t); got != "10.0.2.2" {
		t.Fatalf("guest configured eth0 with %s, want 10.0.2.2", got)
	}
	if st := a.Status(a.Leases()); !slices.Equal(st[0].IPs, []netip.Addr{vmPod.Addr.Addr()}) || st[0].Queues != 1 {
		t.Errorf("Status = %+v", st)
	}
	if out := g.sh(t, "cat /etc/resolv.conf; hostname"); !strings.Contains(out, "nameserver 198.51.100.53") {
		t.Errorf("guest resolv.conf/hostname:\n%s", out)
	}

	g.serveHTTP(t, 8080)
	g.serveHTTP(t, 8081)
	got, err := httpHello(clientNS, netip.AddrPortFrom(vmPod.Addr.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s", clientIP); err != nil || got != want {
		t.Errorf("client -> pod:8080 -> guest = %q, %v; want %q", got, err, want)
	}
	if _, err := httpHello(clientNS, netip.AddrPortFrom(vmPod.Addr.Addr(), 8081).String()); !isRefused(err) {
		t.Errorf("client -> pod:8081 (not declared) = %v, want connection refused", err)
	}
	out := g.sh(t, fmt.Sprintf("nc -w 30 %s 7002 </dev/null", plain.Addr.Addr()))
	if want := fmt.Sprintf("hello %s\n", vmPod.Addr.Addr()); out != want {
		t.Errorf("guest -> plain pod = %q, want %q (masqueraded to the pod address)", out, want)
	}
	out = g.sh(t, fmt.Sprintf("nc -w 30 %s 7001 </dev/null", remoteIP))
	if out != "hello 198.51.100.1\n" {
		t.Errorf("guest -> remote = %q, want the node's uplink address", out)
	}
	checkTeardown(t, tn, g, a, vmPod)
}

// TestGuestBridge: with the bridge binding the guest leases the pod's own address and
// gateway, is reached at the pod address directly, and reaches a remote host through the
// node's masquerade.
func TestGuestBridge(t *testing.T) {
	tn := newTestNode(t)
	clientNS, clientIP := attachHost(t, tn, "client", clientNet)
	remoteNS, remoteIP := attachHost(t, tn, "remote", remoteNet)
	serveGreeting(listenIn(t, remoteNS, ":7001"))
	pod, err := tn.CreatePod("vm-bridge")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-bridge")) })
	a, err := Attach(pod.NetnsPath, bridgeSpec("vm-bridge"), AttachOptions{ServeDHCP: true})
	must(t, err)
	t.Cleanup(func() { must(t, a.Detach()) })
	g := startGuest(t, a, "default")
	if got := g.waitIP(t); got != pod.Addr.Addr().String() {
		t.Fatalf("guest configured eth0 with %s, want the pod address %s", got, pod.Addr.Addr())
	}
	if out := g.sh(t, "cat /sys/class/net/eth0/address; ip route show default"); !strings.Contains(out, pod.MAC.String()) || !strings.Contains(out, "via "+pod.Gateway.String()) {
		t.Errorf("guest MAC/route:\n%s\nwant MAC %s via %s", out, pod.MAC, pod.Gateway)
	}
	g.serveHTTP(t, 8080)
	got, err := httpHello(clientNS, netip.AddrPortFrom(pod.Addr.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s", clientIP); err != nil || got != want {
		t.Errorf("client -> guest at the pod address = %q, %v; want %q", got, err, want)
	}
	out := g.sh(t, fmt.Sprintf("nc -w 30 %s 7001 </dev/null", remoteIP))
	if out != "hello 198.51.100.1\n" {
		t.Errorf("guest -> remote = %q, want the node's uplink address", out)
	}
	checkTeardown(t, tn, g, a, pod)
}

// checkTeardown stops QEMU, detaches and deletes the pod, and checks that everything is gone:
// the pod's links and tables (read while the netns still exists), its netns mount, its host
// veth, and every tap queue and namespace file this process had open.
func checkTeardown(t *testing.T, tn *testNode, g *guestVM, a *Attachment, pod PodNetwork) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	must(t, g.Kill(ctx))
	must(t, a.Detach())
	if links := linkNames(t, pod.NetnsPath); !slices.Equal(links, []string{"eth0", "lo"}) {
		t.Errorf("pod links after Detach = %v, want [eth0 lo]", links)
	}
	if tables := tableNames(t, pod.NetnsPath); len(tables) != 0 {
		t.Errorf("pod tables after Detach = %v", tables)
	}
	must(t, tn.DeletePod(pod.ID))
	if _, err := os.Stat(pod.NetnsPath); !os.IsNotExist(err) {
		t.Errorf("pod netns %s still mounted: %v", pod.NetnsPath, err)
	}
	if slices.Contains(linkNames(t, tn.ns), pod.HostVeth) {
		t.Errorf("host veth %s left on the node", pod.HostVeth)
	}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, fd := range fds {
		if dst, _ := os.Readlink(fd); dst == "/dev/net/tun" || strings.HasPrefix(dst, "net:[") {
			t.Errorf("this process still holds %s (%s)", dst, fd)
		}
	}
}

// TestGuestMasqueradeDualStack: on a dual-stack pod the real guest configures both families by
// itself: 10.0.2.2 by DHCP (udhcpc), fd10:0:2::2 by DHCPv6 (the test guest's vmlet-dhcp6c)
// and its IPv6 default route via fe80::1 from the binding's router advertisements. Status
// reports the pod's two addresses (reachable ones) and the guest's two. The guest reaches the
// bridge's IPv6 gateway and the remote host over IPv6 (source: the node's uplink address after
// both masquerades), and is reachable through the pod's IPv6 address on the declared port only,
// seeing the client's real address.
func TestGuestMasqueradeDualStack(t *testing.T) {
	tn := newTestNodeWith(t, NodeConfig{Subnet6: DefaultNodeSubnet6})
	clientNS, _, client6 := attachHost6(t, tn, "client", clientNet, clientNet6)
	remoteNS, _, remote6 := attachHost6(t, tn, "remote", remoteNet, remoteNet6)
	serveGreeting(listenIn(t, remoteNS, "[::]:7001"))
	pod, err := tn.CreatePod("vm-ds")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-ds")) })
	a, err := Attach(pod.NetnsPath, masqSpec("vm-ds", Port{Port: 8080}), AttachOptions{ServeDHCP: true})
	must(t, err)
	t.Cleanup(func() { must(t, a.Detach()) })
	ip := a.Plan().Interfaces[0]
	serveGreeting(listenIn(t, pod.NetnsPath, netip.AddrPortFrom(ip.Gateway6, 7003).String()))
	g := startGuest(t, a, "default")
	started := time.Now()
	if got := g.waitIP(t); got != "10.0.2.2" {
		t.Fatalf("guest configured eth0 with %s, want 10.0.2.2", got)
	}
	v4 := time.Since(started)
	if got := g.waitIP6(t); got != ip.GuestAddr6.Addr().String() {
		t.Fatalf("guest configured eth0 with %s by DHCPv6, want %s", got, ip.GuestAddr6.Addr())
	}
	t.Logf("resume → IPv4 address %s, → IPv6 address %s (after DAD)", v4.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if l, err := a.WaitLease6(ctx, "default"); err != nil || l.Addr != ip.GuestAddr6 {
		t.Errorf("WaitLease6 = %+v, %v; want %s", l, err, ip.GuestAddr6)
	}
	st := a.Status(a.Leases())
	if want := []netip.Addr{pod.Addr.Addr(), pod.Addr6.Addr()}; !slices.Equal(st[0].IPs, want) {
		t.Errorf("Status IPs = %v, want the pod's %v", st[0].IPs, want)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.0.2.2"), ip.GuestAddr6.Addr()}; !slices.Equal(st[0].GuestIPs, want) {
		t.Errorf("Status GuestIPs = %v, want %v", st[0].GuestIPs, want)
	}
	if out := g.sh(t, "ip -6 route show default"); !strings.Contains(out, "via fe80::1 dev eth0") {
		t.Errorf("guest IPv6 default route = %q, want via fe80::1 (router advertisement)", out)
	}
	out := g.sh(t, fmt.Sprintf("nc -w 30 %s 7003 </dev/null", ip.Gateway6))
	if want := fmt.Sprintf("hello %s\n", ip.GuestAddr6.Addr()); out != want {
		t.Errorf("guest -> bridge gateway [%s]:7003 = %q, want %q", ip.Gateway6, out, want)
	}
	g.serveHTTP(t, 8080)
	g.serveHTTP(t, 8081)
	got, err := httpHello(clientNS, netip.AddrPortFrom(pod.Addr6.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s", client6); err != nil || got != want {
		t.Errorf("client -> [pod]:8080 -> guest = %q, %v; want %q", got, err, want)
	}
	if _, err := httpHello(clientNS, netip.AddrPortFrom(pod.Addr6.Addr(), 8081).String()); !isRefused(err) {
		t.Errorf("client -> [pod]:8081 (not declared) = %v, want connection refused", err)
	}
	out = g.sh(t, fmt.Sprintf("nc -w 30 %s 7001 </dev/null", remote6))
	if out != "hello 2001:db8:e::1\n" {
		t.Errorf("guest -> remote over IPv6 = %q, want the node's uplink address", out)
	}
	checkTeardown(t, tn, g, a, pod)
}
