package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// masqueradeVMI is newVMI with KubeVirt's masquerade interface on the pod network, forwarding
// port 80 (as in KubeVirt's vmi-masquerade example).
func masqueradeVMI(name string) *vmletv1.VirtualMachineInstance {
	vmi := newVMI(name)
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{
		Name:                   "testmasquerade",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}},
		Ports:                  []vmletv1.Port{{Name: "http", Port: 80, Protocol: vmletv1.ProtocolTCP}},
	}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "testmasquerade", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	return vmi
}

// TestVMINetwork: a masquerade VMI with a declared port and a VMI with no interfaces (KubeVirt
// auto-attaches a bridge interface on the pod network) each get their address by DHCP inside
// the guest; status.interfaces reports where they are reachable, confirmed by the guest agent;
// a TCP service in each guest answers a client namespace through the pod IP (masquerade: the
// declared port only); with the agent stopped the launchers' DHCP servers answer a renewal
// (masquerade) and a release and new request (bridge), and the restarted agent reports the
// addresses and keeps the services; deletion leaves no netns, veth, tap, bridge or nftables
// table on the node.
func TestVMINetwork(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	a := startAgent(t, agentOptions{})
	defer func() { a.stop(t) }()
	clientNS, removeClient, err := addClient("net")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := removeClient(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()

	masq, bridge := masqueradeVMI("net-masq"), newVMI("net-bridge")
	vmis := []*vmletv1.VirtualMachineInstance{masq, bridge}
	created := map[string]time.Time{}
	for _, v := range vmis {
		if err := env.Client.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		created[v.Name] = time.Now()
	}
	addrs := map[string]netip.Addr{}
	running, addressed := waitAddresses(t, vmis, 2*time.Minute)
	for _, v := range vmis {
		got := mustGetVMI(t, v)
		t.Logf("%s: created → Running %s → address %s in status %s", v.Name, running[v.Name].Sub(created[v.Name]).Round(10*time.Millisecond),
			got.Status.Interfaces[0].IP, addressed[v.Name].Sub(created[v.Name]).Round(10*time.Millisecond))
		ifc := got.Status.Interfaces[0]
		if col := printedColumn(t, v, "IP"); col != ifc.IP {
			t.Errorf("%s: kubectl's IP column = %q, want %q", v.Name, col, ifc.IP)
		}
		addr, err := netip.ParseAddr(ifc.IP)
		if err != nil || !network.DefaultNodeSubnet.Contains(addr) {
			t.Fatalf("%s: status address %q is not a pod address of %s", v.Name, ifc.IP, network.DefaultNodeSubnet)
		}
		if ifc.PodInterfaceName != "eth0" || ifc.QueueCount != 1 || ifc.MAC == "" || len(ifc.IPs) != 1 || ifc.IPs[0] != ifc.IP {
			t.Errorf("%s: status interface %+v", v.Name, ifc)
		}
		addrs[v.Name] = addr
	}
	if addrs[masq.Name] == addrs[bridge.Name] {
		t.Fatalf("both VMIs got %s", addrs[masq.Name])
	}
	masq, bridge = mustGetVMI(t, masq), mustGetVMI(t, bridge)
	// The guests' own view: masquerade leases KubeVirt's 10.0.2.2, bridge the pod address.
	waitConsoleLine(t, masq, testguest.MarkerIP+" eth0 10.0.2.2")
	waitConsoleLine(t, bridge, testguest.MarkerIP+" eth0 "+addrs[bridge.Name].String())
	if masq.Status.Interfaces[0].Name != "testmasquerade" || bridge.Status.Interfaces[0].Name != vmletv1.DefaultNetworkName {
		t.Errorf("interface names %q, %q", masq.Status.Interfaces[0].Name, bridge.Status.Interfaces[0].Name)
	}
	for _, v := range []*vmletv1.VirtualMachineInstance{masq, bridge} {
		waitAgentConfirms(t, v)
		waitNormalEvent(t, v, "AddressChanged")
	}

	// A TCP service in each guest, reached from the client namespace through the pod address.
	guestServe(t, a, masq, 80, "VMLET-HELLO-MASQ")
	guestServe(t, a, masq, 81, "VMLET-HELLO-UNDECLARED")
	guestServe(t, a, bridge, 80, "VMLET-HELLO-BRIDGE")
	waitReply(t, clientNS, netip.AddrPortFrom(addrs[masq.Name], 80), "VMLET-HELLO-MASQ\n")
	waitReply(t, clientNS, netip.AddrPortFrom(addrs[bridge.Name], 80), "VMLET-HELLO-BRIDGE\n")
	if _, err := readFrom(clientNS, netip.AddrPortFrom(addrs[masq.Name], 81).String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("undeclared port 81 of the masquerade VMI: err = %v, want connection refused (not forwarded)", err)
	}

	// DHCP lives with the VM: with no agent running the launchers answer a renewal and a
	// whole new request (DISCOVER after a RELEASE).
	a.stop(t)
	t0 := time.Now()
	waitRenewal(t, a, masq, renewCmd)
	waitRequest(t, a, bridge)
	t.Logf("leases renewed and requested again with no agent running: %s", time.Since(t0).Round(time.Millisecond))
	// A restarted agent attaches the running VMIs again and finds their DHCP served.
	a = startAgent(t, agentOptions{})
	for _, v := range []*vmletv1.VirtualMachineInstance{masq, bridge} {
		waitRenewal(t, a, v, renewCmd)
		if got := mustGetVMI(t, v); len(got.Status.Interfaces) != 1 || got.Status.Interfaces[0].IP != addrs[v.Name].String() {
			t.Errorf("%s after the agent restart: status interfaces %+v, want address %s", v.Name, got.Status.Interfaces, addrs[v.Name])
		}
	}
	waitReply(t, clientNS, netip.AddrPortFrom(addrs[masq.Name], 80), "VMLET-HELLO-MASQ\n")
	// Only the launcher holds a pod's DHCP socket: not the agent (it closed its copies after
	// the hand-overs), not QEMU.
	for _, v := range []*vmletv1.VirtualMachineInstance{masq, bridge} {
		st, err := a.runtime.State(string(v.UID))
		if err != nil {
			t.Fatal(err)
		}
		holders, err := dhcpSocketHolders(filepath.Join(testNet.cfg.NetnsDir, "vmlet-"+string(v.UID)))
		if err != nil {
			t.Fatal(err)
		}
		if len(holders) != 1 || holders[st.Pid] != 1 {
			t.Errorf("%s: DHCP sockets held by %v (pid: sockets), want only the launcher %d, once", v.Name, holders, st.Pid)
		}
	}

	for _, v := range []*vmletv1.VirtualMachineInstance{masq, bridge} {
		if err := env.Client.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []*vmletv1.VirtualMachineInstance{masq, bridge} {
		waitDeleted(t, client.ObjectKeyFromObject(v))
		assertNothingLeft(t, string(v.UID))
		assertNoPodNetwork(t, string(v.UID))
	}
	assertNodeNetworkGone(t)
}

// waitAddress waits until the VMI's status has an address on its first interface; it also
// returns when it first saw the VMI Running.
func waitAddress(t *testing.T, key client.ObjectKey, d time.Duration) (*vmletv1.VirtualMachineInstance, time.Time) {
	t.Helper()
	var vmi *vmletv1.VirtualMachineInstance
	var running time.Time
	eventually(t, d, key.Name+" address in status.interfaces", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		vmi = v
		if v.Status.Phase == vmletv1.Running && running.IsZero() {
			running = time.Now()
		}
		if v.Status.Phase == vmletv1.Failed || v.Status.Phase == vmletv1.Succeeded {
			t.Fatalf("%s ended: %s", key.Name, summary(v))
		}
		return len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != "", fmt.Sprintf("%s interfaces=%+v", summary(v), v.Status.Interfaces)
	})
	return vmi, running
}

// waitAddresses waits until every VMI's status has an address on its first interface and
// returns when it first saw each Running and with its address.
func waitAddresses(t *testing.T, vmis []*vmletv1.VirtualMachineInstance, d time.Duration) (running, addressed map[string]time.Time) {
	t.Helper()
	running, addressed = map[string]time.Time{}, map[string]time.Time{}
	eventually(t, d, "addresses in status.interfaces", func() (bool, string) {
		var seen []string
		for _, vmi := range vmis {
			v, err := getVMI(t, client.ObjectKeyFromObject(vmi))
			if err != nil {
				return false, err.Error()
			}
			if v.Status.Phase == vmletv1.Failed || v.Status.Phase == vmletv1.Succeeded {
				t.Fatalf("%s ended: %s", v.Name, summary(v))
			}
			now := time.Now()
			if _, ok := running[v.Name]; !ok && v.Status.Phase == vmletv1.Running {
				running[v.Name] = now
			}
			if _, ok := addressed[v.Name]; !ok && len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != "" {
				addressed[v.Name] = now
			}
			seen = append(seen, fmt.Sprintf("%s: %s interfaces=%+v", v.Name, summary(v), v.Status.Interfaces))
		}
		return len(addressed) == len(vmis), strings.Join(seen, "; ")
	})
	return running, addressed
}

// printedColumn is what `kubectl get vmi` shows in column name: the API server's Table
// rendering of the CRD's printer columns.
func printedColumn(t *testing.T, v *vmletv1.VirtualMachineInstance, name string) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("%s/apis/%s/namespaces/%s/virtualmachineinstances/%s", strings.TrimRight(env.Config.Host, "/"), vmletv1.GroupVersion, v.Namespace, v.Name)
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(resp.Body).Decode(&table); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("get table of %s: status %d, %v", v.Name, resp.StatusCode, err)
	}
	for i, c := range table.ColumnDefinitions {
		if c.Name == name && len(table.Rows) == 1 && i < len(table.Rows[0].Cells) {
			s, _ := table.Rows[0].Cells[i].(string)
			return s
		}
	}
	t.Fatalf("table of %s has no column %s: %+v", v.Name, name, table.ColumnDefinitions)
	return ""
}

func mustGetVMI(t testing.TB, v *vmletv1.VirtualMachineInstance) *vmletv1.VirtualMachineInstance {
	t.Helper()
	got, err := getVMI(t, client.ObjectKeyFromObject(v))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func waitDeleted(t testing.TB, key client.ObjectKey) {
	t.Helper()
	eventually(t, 90*time.Second, key.Name+" deleted", vmiGone(t, key))
}

// vmiGone is a condition for eventually and pollUntil: the VMI is gone from the API.
func vmiGone(t testing.TB, key client.ObjectKey) func() (bool, string) {
	return func() (bool, string) {
		v, err := getVMI(t, key)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, summary(v)
	}
}

func consoleLog(v *vmletv1.VirtualMachineInstance) string {
	return filepath.Join(runRoot, string(v.UID), "logs", "serial.log")
}

// waitSerial waits for a line of the guest's console log.
func waitConsoleLine(t *testing.T, v *vmletv1.VirtualMachineInstance, line string) {
	t.Helper()
	eventually(t, time.Minute, v.Name+" console line "+line, func() (bool, string) {
		b, err := os.ReadFile(consoleLog(v))
		return err == nil && slices.Contains(strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n"), line), tail(b)
	})
}

// waitAgentConfirms waits until the guest agent reports the leased address on the NIC.
func waitAgentConfirms(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	waitCondition(t, client.ObjectKeyFromObject(v), vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
	eventually(t, time.Minute, v.Name+" interface confirmed by the guest agent", func() (bool, string) {
		got, err := getVMI(t, client.ObjectKeyFromObject(v))
		if err != nil {
			return false, err.Error()
		}
		s := got.Status.Interfaces
		return len(s) == 1 && s[0].InfoSource == "domain, guest-agent" && s[0].InterfaceName == "eth0", fmt.Sprintf("%+v", s)
	})
}

// waitNormalEvent waits for a Normal event with reason about the VMI.
func waitNormalEvent(t *testing.T, vmi *vmletv1.VirtualMachineInstance, reason string) {
	t.Helper()
	eventually(t, 10*time.Second, "Normal event "+reason, func() (bool, string) {
		var l eventsv1.EventList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(vmi.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range l.Items {
			if e.Regarding.UID == vmi.UID && e.Type == "Normal" && e.Reason == reason {
				return true, ""
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		return false, fmt.Sprint(seen)
	})
}

// guestExec runs a shell command in the guest through the launcher's GuestExec RPC.
func guestShell(t testing.TB, a *agent, v *vmletv1.VirtualMachineInstance, cmd string) string {
	t.Helper()
	out, err := guestShellErr(a, v, cmd)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// guestShellErr is guestShell returning its error.
func guestShellErr(a *agent, v *vmletv1.VirtualMachineInstance, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(string(v.UID)))
	if err != nil {
		return "", err
	}
	defer c.Close()
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 20*time.Second)
	if err != nil {
		return "", fmt.Errorf("%s: guest exec %q: %w", v.Name, cmd, err)
	}
	if r.GetExitCode() != 0 {
		return "", fmt.Errorf("%s: guest exec %q: exit %d: %s", v.Name, cmd, r.GetExitCode(), r.GetStderr())
	}
	return string(r.GetStdout()), nil
}

// guestServe starts a busybox nc in the guest that answers every connection on port with
// reply, and waits until it does so on the guest's loopback (which the test guest's init
// leaves down).
func guestServe(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance, port int, reply string) {
	t.Helper()
	guestShell(t, a, v, fmt.Sprintf("ip link set lo up; nc -ll -p %d -e echo %s </dev/null >/dev/null 2>&1 &", port, reply))
	eventually(t, 20*time.Second, fmt.Sprintf("%s: guest service on port %d", v.Name, port), func() (bool, string) {
		out := guestShell(t, a, v, fmt.Sprintf("nc -w 2 127.0.0.1 %d </dev/null 2>&1 || true", port))
		return strings.Contains(out, reply), out
	})
}

// waitReply waits until a connection from ns to addr reads want.
func waitReply(t *testing.T, ns string, addr netip.AddrPort, want string) {
	t.Helper()
	eventually(t, 30*time.Second, "reply from "+addr.String(), func() (bool, string) {
		got, err := readFrom(ns, addr.String())
		if err != nil {
			return false, err.Error()
		}
		return got == want, fmt.Sprintf("%q", got)
	})
}

// waitRenewal makes the guest's udhcpc renew its lease (SIGUSR1) until it prints its address
// again: only a DHCP server that answers makes it do so.
func waitRenewal(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance, cmd string) {
	t.Helper()
	count := func() int { return leaseLines(v) }
	before := count()
	eventually(t, time.Minute, v.Name+" lease renewed", func() (bool, string) {
		if count() > before {
			return true, ""
		}
		guestShell(t, a, v, cmd)
		return false, fmt.Sprintf("%d address lines", count())
	})
}

// renewCmd makes the test guest's udhcpc renew its lease on eth0 (busybox: SIGUSR1).
const renewCmd = "kill -USR1 $(cat /run/udhcpc.eth0.pid)"

// leaseLines counts the guest's lines saying udhcpc configured a lease on eth0.
func leaseLines(v *vmletv1.VirtualMachineInstance) int { return leaseLinesOn(v, "eth0") }

// leaseLinesOn counts the guest's lines saying udhcpc configured a lease on iface.
func leaseLinesOn(v *vmletv1.VirtualMachineInstance, iface string) int {
	b, _ := os.ReadFile(consoleLog(v))
	return strings.Count(string(b), testguest.MarkerIP+" "+iface+" ")
}

// launcherDHCP lists the interfaces whose DHCP the VMI's launcher serves (GetDomain).
func launcherDHCP(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(string(v.UID)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	d, err := c.GetDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d.GetDhcpInterfaces()
}

// waitRequest makes the guest's udhcpc release its lease and ask for a new one (SIGUSR2, then
// SIGUSR1: DISCOVER, OFFER, REQUEST, ACK) once, and waits until it configured it.
func waitRequest(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	before := leaseLines(v)
	guestShell(t, a, v, "kill -USR2 $(cat /run/udhcpc.eth0.pid); sleep 1; kill -USR1 $(cat /run/udhcpc.eth0.pid)")
	eventually(t, time.Minute, v.Name+" lease released and requested again", func() (bool, string) {
		n := leaseLines(v)
		return n > before, fmt.Sprintf("%d address lines", n)
	})
}

// assertNoPodNetwork checks the VMI's pod network is gone from the node: no netns, no veth.
func assertNoPodNetwork(t testing.TB, uid string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(testNet.cfg.NetnsDir, "vmlet-"+uid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod netns of %s left behind: %v", uid, err)
	}
	plan, err := network.PlanPod(testNet.cfg, uid, nil)
	if err != nil {
		t.Fatal(err)
	}
	links, _, err := nodeState()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(links, plan.HostVeth) {
		t.Errorf("pod veth %s of %s left behind", plan.HostVeth, uid)
	}
	if veths, err := podVeths(uid); err != nil || len(veths) > 0 {
		t.Errorf("veths of %s (secondary interfaces included) left behind: %v %v", uid, veths, err)
	}
}

// assertNodeNetworkGone checks that, with no pod left, the node bridge and its NAT table went
// too: the node netns holds only lo and the test's client uplinks.
func assertNodeNetworkGone(t *testing.T) {
	t.Helper()
	if pods, _ := os.ReadDir(testNet.cfg.NetnsDir); len(pods) > 0 {
		t.Errorf("pod namespaces left on the node: %v", pods)
		return
	}
	links, tables, err := nodeState()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l != "lo" && !strings.HasPrefix(l, "up-") {
			t.Errorf("node link %s left behind (links %v)", l, links)
		}
	}
	if len(tables) > 0 {
		t.Errorf("node nftables tables left behind: %v", tables)
	}
}

// clientNet and clientNet6 are where test clients sit, behind the node (TEST-NET-3, RFC 5737;
// IPv6 documentation prefix, RFC 3849).
var (
	clientNet  = netip.MustParsePrefix("203.0.113.0/24")
	clientNet6 = netip.MustParsePrefix("2001:db8:c::/64")
)

// addClient creates netns client-<name> behind the node: a veth with 203.0.113.1/24 and
// 2001:db8:c::1/64 on the node side, .2 and ::2 (at most one client) on the client side and
// default routes via .1 and ::1. It returns the client's netns path and a function removing it.
func addClient(name string) (string, func() error, error) {
	path := filepath.Join(testNet.dir, "client-"+name)
	if err := createNetns(path); err != nil {
		return "", nil, err
	}
	// The veth would go with the namespace, but the kernel destroys an unmounted namespace
	// asynchronously: delete it first so that the next test finds the node as it was.
	remove := func() error {
		if err := deleteNodeLink("up-" + name); err != nil {
			return err
		}
		return removeNetns(path)
	}
	nodeAddr := netip.PrefixFrom(clientNet.Addr().Next(), clientNet.Bits())
	clientAddr := netip.PrefixFrom(nodeAddr.Addr().Next(), clientNet.Bits())
	nodeAddr6 := netip.PrefixFrom(clientNet6.Addr().Next(), clientNet6.Bits())
	clientAddr6 := netip.PrefixFrom(nodeAddr6.Addr().Next(), clientNet6.Bits())
	err := func() error {
		node, err := netns.GetFromPath(testNet.node)
		if err != nil {
			return err
		}
		defer node.Close()
		client, err := netns.GetFromPath(path)
		if err != nil {
			return err
		}
		defer client.Close()
		h, err := netlink.NewHandleAt(node)
		if err != nil {
			return err
		}
		defer h.Close()
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up-" + name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(client)}
		if err := h.LinkAdd(v); err != nil {
			return fmt.Errorf("add veth: %w", err)
		}
		if err := h.AddrAdd(v, &netlink.Addr{IPNet: ipNet(nodeAddr)}); err != nil {
			return err
		}
		// No duplicate address detection: the addresses are usable at once.
		if err := h.AddrAdd(v, &netlink.Addr{IPNet: ipNet(nodeAddr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
		if err := h.LinkSetUp(v); err != nil {
			return err
		}
		ch, err := netlink.NewHandleAt(client)
		if err != nil {
			return err
		}
		defer ch.Close()
		l, err := ch.LinkByName("eth0")
		if err != nil {
			return err
		}
		if err := ch.AddrAdd(l, &netlink.Addr{IPNet: ipNet(clientAddr)}); err != nil {
			return err
		}
		if err := ch.AddrAdd(l, &netlink.Addr{IPNet: ipNet(clientAddr6), Flags: unix.IFA_F_NODAD}); err != nil {
			return err
		}
		if err := ch.LinkSetUp(l); err != nil {
			return err
		}
		if err := ch.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: nodeAddr.Addr().AsSlice()}); err != nil {
			return err
		}
		return ch.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: nodeAddr6.Addr().AsSlice(), Dst: ipNet(netip.MustParsePrefix("::/0"))})
	}()
	if err != nil {
		return "", nil, errors.Join(fmt.Errorf("add client %s: %w", name, err), remove())
	}
	return path, remove, nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// readFrom connects to TCP addr from inside netns ns and returns what the peer sends before it
// closes the connection.
func readFrom(ns, addr string) (string, error) {
	var c net.Conn
	if err := inNetns(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// nodeState lists the links and nftables tables of the node netns, for leak checks.
func nodeState() (links, tables []string, err error) {
	ls, ts, err := netnsContents(testNet.node)
	if err != nil {
		return nil, nil, err
	}
	for _, l := range ls {
		links = append(links, l.Attrs().Name)
	}
	for _, t := range ts {
		tables = append(tables, t.Name)
	}
	return links, tables, nil
}

// deleteNodeLink deletes the link name from the node netns; a missing link is not an error.
func deleteNodeLink(name string) error { return deleteLink(testNet.node, name) }

// deleteLink deletes the link name from the netns at path; a missing link is not an error.
func deleteLink(path, name string) error {
	node, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer node.Close()
	h, err := netlink.NewHandleAt(node)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			return nil
		}
		return err
	}
	return h.LinkDel(l)
}
