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
	a, err := Attach(vmPod.NetnsPath, masqSpec("vm-masq", Port{Port: 8080}), AttachOptions{OnLease: func(l Lease) { leases <- l }})
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
	if st := a.Status(); !slices.Equal(st[0].IPs, []netip.Addr{vmPod.Addr.Addr()}) || st[0].Queues != 1 {
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
	a, err := Attach(pod.NetnsPath, bridgeSpec("vm-bridge"), AttachOptions{})
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

// TestGuestMasqueradeDualStack: on a dual-stack pod the real guest kernel takes its IPv6
// default route (via fe80::1) from the binding's router advertisements; with its IPv6
// address configured it is reachable through the pod's IPv6 address on the declared port and
// reaches the remote host over IPv6. The test guest has no DHCPv6 client (busybox-static in
// Debian 12 lacks udhcpc6), so the address is set through the guest agent here; the DHCPv6
// server itself is tested with a library client in TestMasqueradeDualStack.
func TestGuestMasqueradeDualStack(t *testing.T) {
	tn := newTestNodeWith(t, NodeConfig{Subnet6: DefaultNodeSubnet6})
	clientNS, _, client6 := attachHost6(t, tn, "client", clientNet, clientNet6)
	remoteNS, _, remote6 := attachHost6(t, tn, "remote", remoteNet, remoteNet6)
	serveGreeting(listenIn(t, remoteNS, "[::]:7001"))
	pod, err := tn.CreatePod("vm-ds")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-ds")) })
	a, err := Attach(pod.NetnsPath, masqSpec("vm-ds", Port{Port: 8080}), AttachOptions{})
	must(t, err)
	t.Cleanup(func() { must(t, a.Detach()) })
	g := startGuest(t, a, "default")
	if got := g.waitIP(t); got != "10.0.2.2" {
		t.Fatalf("guest configured eth0 with %s, want 10.0.2.2", got)
	}
	// The guest has no event to block on: its shell waits (bounded) for the RA's route.
	g.sh(t, `i=0; until ip -6 route show default | grep -q 'via fe80::1'; do i=$((i+1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done`)
	g.sh(t, "echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad && ip -6 addr add fd10:0:2::2/128 dev eth0")
	g.serveHTTP(t, 8080)
	got, err := httpHello(clientNS, netip.AddrPortFrom(pod.Addr6.Addr(), 8080).String())
	if want := fmt.Sprintf("hello %s", client6); err != nil || got != want {
		t.Errorf("client -> [pod]:8080 -> guest = %q, %v; want %q", got, err, want)
	}
	out := g.sh(t, fmt.Sprintf("nc -w 30 %s 7001 </dev/null", remote6))
	if out != "hello 2001:db8:e::1\n" {
		t.Errorf("guest -> remote over IPv6 = %q, want the node's uplink address", out)
	}
	checkTeardown(t, tn, g, a, pod)
}
