package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMINetworkDualStack: on a dual-stack node a VMI with a masquerade interface gets both
// its addresses inside the guest by itself: 10.0.2.2 by DHCP and fd10:0:2::2 by DHCPv6, its
// IPv6 default route from router advertisements. status.interfaces[].ipAddresses lists the
// pod's IPv4 and IPv6 addresses (as KubeVirt reports masquerade: where the VMI is reachable;
// ipAddress stays the IPv4 one), exactly those eth0 has in the pod's netns. A TCP service in
// the guest answers a client namespace through the pod's IPv6 address on the declared port
// (undeclared: refused), and the guest reaches a listener in the client namespace over IPv6
// (seen from the node's uplink address: pod and node masquerade). With the agent stopped the
// launcher's DHCPv4 and DHCPv6 servers answer the guest's renewals of both leases; after the
// agent restart the status keeps both addresses. Deletion leaves nothing.
func TestVMINetworkDualStack(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	a := startAgent(t, agentOptions{Subnet6: network.DefaultNodeSubnet6})
	defer func() { a.stop(t) }()
	clientNS, removeClient, err := addClient("ds")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := removeClient(); err != nil {
			t.Error(err)
		}
	}()
	client6 := clientNet6.Addr().Next().Next()
	stopServe := serveHello(t, clientNS, netip.AddrPortFrom(client6, 7001))
	defer stopServe()

	ctx := context.Background()
	vmi := masqueradeVMI("net-ds")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	var got *vmletv1.VirtualMachineInstance
	var first, both time.Time
	eventually(t, 2*time.Minute, "IPv4 and IPv6 addresses in status.interfaces", func() (bool, string) {
		v, err := getVMI(t, client.ObjectKeyFromObject(vmi))
		if err != nil {
			return false, err.Error()
		}
		if v.Status.Phase == vmletv1.Failed || v.Status.Phase == vmletv1.Succeeded {
			t.Fatalf("%s ended: %s", v.Name, summary(v))
		}
		got = v
		if len(v.Status.Interfaces) > 0 && len(v.Status.Interfaces[0].IPs) > 0 && first.IsZero() {
			first = time.Now()
		}
		return len(v.Status.Interfaces) > 0 && len(v.Status.Interfaces[0].IPs) == 2, fmt.Sprintf("%s interfaces=%+v", summary(v), v.Status.Interfaces)
	})
	both = time.Now()
	t.Logf("created → first address in status %s → both addresses %s", first.Sub(created).Round(10*time.Millisecond), both.Sub(created).Round(10*time.Millisecond))

	ifc := got.Status.Interfaces[0]
	pod := podAddrs(t, string(vmi.UID))
	if want := addrStrings(pod); !slices.Equal(ifc.IPs, want) || ifc.IP != want[0] {
		t.Fatalf("status ipAddress %q ipAddresses %v, want the pod's %v (IPv4 first)", ifc.IP, ifc.IPs, want)
	}
	pod4, pod6 := pod[0], pod[1]
	if !network.DefaultNodeSubnet.Contains(pod4) || !network.DefaultNodeSubnet6.Contains(pod6) {
		t.Fatalf("pod addresses %v outside the node subnets", pod)
	}
	// The guest's own view: both families configured by its DHCP clients.
	waitConsoleLine(t, got, testguest.MarkerIP+" eth0 10.0.2.2")
	waitConsoleLine(t, got, testguest.MarkerIP6+" eth0 fd10:0:2::2")
	waitAgentConfirms(t, got)
	if out := guestShell(t, a, got, "ip -6 addr show dev eth0 scope global; ip -6 route show default"); !strings.Contains(out, "fd10:0:2::2/128") || !strings.Contains(out, "via fe80::1 dev eth0") {
		t.Errorf("guest IPv6 state:\n%s\nwant fd10:0:2::2/128 and a default route via fe80::1", out)
	}

	// Guest → client over IPv6: the client sees the node's uplink address.
	out := guestShell(t, a, got, fmt.Sprintf("nc -w 20 %s 7001 </dev/null", client6))
	if want := fmt.Sprintf("hello %s\n", clientNet6.Addr().Next()); out != want {
		t.Errorf("guest -> [%s]:7001 = %q, want %q (masqueraded by pod and node)", client6, out, want)
	}
	// Client → guest over IPv6 through the pod address: declared port only.
	guestServe(t, a, got, 80, "VMLET-HELLO-IPV6")
	guestServe(t, a, got, 81, "VMLET-HELLO-UNDECLARED")
	waitReply(t, clientNS, netip.AddrPortFrom(pod6, 80), "VMLET-HELLO-IPV6\n")
	waitReply(t, clientNS, netip.AddrPortFrom(pod4, 80), "VMLET-HELLO-IPV6\n")
	if _, err := readFrom(clientNS, netip.AddrPortFrom(pod6, 81).String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("undeclared port 81 over IPv6: err = %v, want connection refused (not forwarded)", err)
	}

	// The launcher serves DHCPv4, DHCPv6 and router advertisements: with no agent running the
	// guest renews both leases. The restarted agent reads them from the launcher: the status
	// keeps both addresses while the guest renews them again, one family after the other.
	a.stop(t)
	waitRenewal(t, a, got, renewCmd)
	waitRenewal6(t, a, got)
	a = startAgent(t, agentOptions{Subnet6: network.DefaultNodeSubnet6})
	waitRenewal(t, a, got, renewCmd)
	assertStatusIPs(t, vmi, ifc.IPs)
	waitRenewal6(t, a, got)
	assertStatusIPs(t, vmi, ifc.IPs)
	waitReply(t, clientNS, netip.AddrPortFrom(pod6, 80), "VMLET-HELLO-IPV6\n")

	if err := env.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, client.ObjectKeyFromObject(vmi))
	assertNothingLeft(t, string(vmi.UID))
	assertNoPodNetwork(t, string(vmi.UID))
	assertNodeNetworkGone(t)
}

// assertStatusIPs checks status.interfaces[0].ipAddresses.
func assertStatusIPs(t *testing.T, vmi *vmletv1.VirtualMachineInstance, want []string) {
	t.Helper()
	if got := mustGetVMI(t, vmi); len(got.Status.Interfaces) != 1 || !slices.Equal(got.Status.Interfaces[0].IPs, want) {
		t.Errorf("status interfaces %+v, want ipAddresses %v", got.Status.Interfaces, want)
	}
}

// waitRenewal6 makes the guest's DHCPv6 client renew (SIGUSR1) until it prints its address
// again: only a DHCPv6 server that answers the RENEW makes it do so.
func waitRenewal6(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	count := func() int {
		b, _ := os.ReadFile(consoleLog(v))
		return strings.Count(string(b), testguest.MarkerIP6+" eth0 ")
	}
	before := count()
	eventually(t, time.Minute, v.Name+" IPv6 lease renewed", func() (bool, string) {
		if count() > before {
			return true, ""
		}
		guestShell(t, a, v, "kill -USR1 $(cat /run/dhcp6c.eth0.pid)")
		return false, fmt.Sprintf("%d IPv6 address lines", count())
	})
}

// podAddrs reads the global addresses of eth0 in the VMI's pod netns, IPv4 first.
// Equivalent to `ip -n vmlet-<uid> addr show dev eth0 scope global`.
func podAddrs(t *testing.T, uid string) []netip.Addr {
	t.Helper()
	ns, err := netns.GetFromPath(filepath.Join(testNet.cfg.NetnsDir, "vmlet-"+uid))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		as, err := h.AddrList(l, family)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Scope == unix.RT_SCOPE_UNIVERSE {
				ip, _ := netip.AddrFromSlice(a.IP)
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

// serveHello listens on TCP addr inside netns ns and answers every connection with
// "hello <peer address>\n", so a dialer learns which source address arrived. The returned
// function stops it.
func serveHello(t *testing.T, ns string, addr netip.AddrPort) func() {
	t.Helper()
	var ln net.Listener
	if err := inNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "hello %s\n", host)
			c.Close()
		}
	}()
	return func() { ln.Close() }
}
