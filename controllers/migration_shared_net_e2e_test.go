package controllers_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestMigrateSharedNetwork: a VMI with a bridge interface on the multus network both nodes
// share (controllers.SharedNetwork, a network.Segment, as `vmlet local --nodes 2` offers it) is
// LiveMigratable; it migrates there and back, and the interface keeps its address and MAC: a
// peer on the shared network reaches a service in the guest at that address before, after each
// migration and after the guest renewed its lease on the target (whose DHCP offers the same
// address). The node the guest left keeps nothing of it on the segment, nor does the target of
// an aborted migration. An interface plugged and one set absent after the source published its
// layout, while the target's launcher starts, are left by the source (a HotplugDeferred event
// says so): the target's QEMU starts with the source's NICs, the absent one included, and once
// the guest runs there its node plugs the new one, and one plugged mid-stream, and unplugs the
// absent one, with no Warning event. Deleting the VMI leaves the segment empty.
func TestMigrateSharedNetwork(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	segNS := filepath.Join(testNet.dir, "shared-segment")
	if err := createNetns(segNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeNetns(segNS); err != nil {
			t.Error(err)
		}
	})
	gate := &stepGate{step: controllers.TraceLauncherExec}
	n := startTwoNodesOpts(t, nil, func(o *agentOptions) {
		o.SharedNetns = segNS
		if o.Node != nil { // the second node's agent: the gate holds it as a target
			o.Trace = gate.trace
		}
	})
	defer n.stop(t)

	vmi := masqueradeVMI("shared-net")
	vmi.Labels = map[string]string{"vmlet.dev/shared-net": "slow"} // the slow policy's, created later
	ifc, nw := secondaryNIC("blue", "default/"+controllers.SharedNetwork)
	vmi.Spec.Domain.Devices.Interfaces = append(vmi.Spec.Domain.Devices.Interfaces, ifc)
	vmi.Spec.Networks = append(vmi.Spec.Networks, nw)
	ctx := context.Background()
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer func() { // a failed test leaves no VM behind (the agents stop after this)
		if t.Failed() {
			gate.open()
			_ = env.Client.Delete(context.Background(), vmi)
			waitDeleted(t, key)
		}
	}()
	var blue vmletv1.VirtualMachineInstanceNetworkInterface
	eventually(t, 2*time.Minute, "the shared interface's address in status.interfaces", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		vmi = v
		blue, _ = statusInterface(v, "blue")
		return blue.IP != "", fmt.Sprintf("%s interfaces=%+v", summary(v), v.Status.Interfaces)
	})
	addr, err := netip.ParseAddr(blue.IP)
	if err != nil || !network.DefaultSegmentSubnet.Contains(addr) {
		t.Fatalf("shared interface's address %q, want one of %s", blue.IP, network.DefaultSegmentSubnet)
	}
	uid := string(vmi.UID)
	waitConsoleMarker(t, vmi, testguest.MarkerIP+" eth1 "+blue.IP)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)

	peer := sharedPeer(t, segNS, "198.19.119.250/24")
	// The guest's service keeps running through the migrations (its memory moves with it).
	guestServe(t, n.a, vmi, 80, "HELLO-SHARED")
	waitReply(t, peer, netip.AddrPortFrom(addr, 80), "HELLO-SHARED\n")
	rw := watchReady(t, vmi)
	defer rw.stop()

	from, to := testNode, secondNode
	for _, name := range []string{"shared-there", "shared-back"} {
		m := migrate(t, vmi, name)
		if m.Status.Phase != vmletv1.MigrationSucceeded {
			t.Fatalf("%s: phase %s, state %+v, conditions %+v", name, m.Status.Phase, m.Status.MigrationState, m.Status.Conditions)
		}
		vmi = mustGetVMI(t, vmi)
		if vmi.Status.NodeName != to {
			t.Fatalf("%s: the vmi is on %s, want %s", name, vmi.Status.NodeName, to)
		}
		ms := vmi.Status.MigrationState
		if !slices.ContainsFunc(ms.SourceDomain.Devices, func(d vmletv1.MigrationDevicePort) bool { return d.Kind == "nic" && d.Hotplugged }) {
			t.Errorf("%s: the source layout marks no NIC hot-plugged: %+v", name, ms.SourceDomain.Devices)
		}
		ta := n.on(to)
		waitLauncherAgent(t, ta, uid)
		waitReply(t, peer, netip.AddrPortFrom(addr, 80), "HELLO-SHARED\n")
		// The target's DHCP service gives the guest the same address again.
		leases := func() int { // the console log of the guest's QEMU on this node
			b, _ := os.ReadFile(filepath.Join(ta.runtime.Dir(uid), "logs", "serial.log"))
			return strings.Count(string(b), testguest.MarkerIP+" eth1 "+blue.IP)
		}
		// One renewal (udhcpc retransmits itself): the script flushes and adds the address again,
		// so a second one in flight would race the check below.
		renewed := leases()
		guestShell(t, ta, vmi, "kill -USR1 $(cat /run/udhcpc.eth1.pid)")
		eventually(t, time.Minute, "eth1's lease renewed on "+to, func() (bool, string) {
			return leases() > renewed, fmt.Sprintf("%d lines of eth1 configured with %s", leases(), blue.IP)
		})
		eventually(t, 10*time.Second, "eth1's address after the renewal", func() (bool, string) {
			out := guestShell(t, ta, vmi, "ip -4 -o addr show dev eth1")
			return strings.Contains(out, " "+blue.IP+"/"), out
		})
		eventually(t, 30*time.Second, name+": status.interfaces", func() (bool, string) {
			v, err := getVMI(t, key)
			if err != nil {
				return false, err.Error()
			}
			got, _ := statusInterface(v, "blue")
			return got.IP == blue.IP && got.MAC == blue.MAC, fmt.Sprintf("%+v, want %s %s", got, blue.IP, blue.MAC)
		})
		netnsDir, volumes := testNet.cfg.NetnsDir, volumeRoot
		if from == secondNode {
			netnsDir, volumes = n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot
		}
		waitLeft(t, n.on(from), netnsDir, volumes, uid)
		if ports := segmentPorts(t, segNS); len(ports) != 2 { // the guest's on the target, the peer
			t.Errorf("%s: segment ports %v, want the target's and the peer's", name, ports)
		}
		from, to = to, from
	}
	if bad := rw.notReady(); len(bad) > 0 {
		t.Errorf("Ready dropped during the migrations: %v", bad)
	}

	// Plugged, and unplugged (state: absent), while the guest migrates (slowly: 8 MiB/s for a
	// 128 MiB guest): the source leaves its QEMU alone mid-stream; the node the guest then runs
	// on plugs the new one (an address of the segment) and unplugs the other, with which its
	// QEMU started.
	createPolicy(t, "shared-net-slow", map[string]string{"vmlet.dev/shared-net": "slow"}, nil, func(s *migrationsv1.MigrationPolicySpec) {
		s.BandwidthPerMigration = ptr.To(resource.MustParse("8Mi"))
	})
	// Aborted (the migration deleted while it runs): the target removes its pod interface on
	// the segment, the source keeps its own, and the guest stays reachable at its address.
	aborted := startMigration(t, vmi, "shared-abort")
	waitMigrationPhase(t, aborted, vmletv1.MigrationRunning)
	if ports := segmentPorts(t, segNS); len(ports) != 3 {
		t.Errorf("segment ports while migrating %v, want the source's, the target's and the peer's", ports)
	}
	abort(t, aborted)
	if ms := mustGetVMI(t, vmi).Status.MigrationState; ms == nil || ms.AbortStatus != vmletv1.MigrationAbortSucceeded {
		t.Fatalf("migrationState after the abort %+v", ms)
	}
	waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
	eventually(t, 30*time.Second, "the target's segment port gone after the abort", func() (bool, string) {
		ports := segmentPorts(t, segNS)
		return len(ports) == 2, fmt.Sprintf("segment ports %v", ports)
	})
	waitReply(t, peer, netip.AddrPortFrom(addr, 80), "HELLO-SHARED\n")

	plugStart := time.Now() // the abort's Warning events are before
	// Green plugged and blue set absent after the source published its layout, while the
	// target's launcher starts (held there): the source changes no NIC and says so; the
	// target's QEMU starts with blue, as the source's guest has it. Yellow is plugged while
	// the stream runs.
	gate.arm()
	plug := startMigration(t, vmi, "shared-plug")
	gate.wait(t, time.Minute)
	green, greenNet := secondaryNIC("green", controllers.SharedNetwork)
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces[1].State = vmletv1.InterfaceStateAbsent
		s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, green)
		s.Networks = append(s.Networks, greenNet)
	}); err != nil {
		t.Fatal(err)
	}
	waitEventNote(t, 30*time.Second, vmi, "Normal", "HotplugDeferred", "to plug green; to unplug blue", plugStart)
	gate.open()
	waitMigrationPhase(t, plug, vmletv1.MigrationRunning)
	yellow, yellowNet := secondaryNIC("yellow", controllers.SharedNetwork)
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, yellow)
		s.Networks = append(s.Networks, yellowNet)
	}); err != nil {
		t.Fatal(err)
	}
	if m := waitMigration(t, plug, 2*time.Minute); m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration with NICs plugged and unplugged meanwhile: phase %s, state %+v", m.Status.Phase, m.Status.MigrationState)
	}
	if vmi = mustGetVMI(t, vmi); vmi.Status.NodeName != secondNode {
		t.Fatalf("after the migration with NICs plugged and unplugged meanwhile: on %s", vmi.Status.NodeName)
	}
	blueVeth := " " + network.SecondaryInterfaceName("blue") + " "
	eventually(t, 2*time.Minute, "green and yellow plugged and blue unplugged on "+secondNode, func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		g, _ := statusInterface(v, "green")
		y, _ := statusInterface(v, "yellow")
		_, bluePresent := statusInterface(v, "blue")
		ga, gerr := netip.ParseAddr(g.IP)
		ya, yerr := netip.ParseAddr(y.IP)
		ports := segmentPorts(t, segNS)
		return gerr == nil && yerr == nil && network.DefaultSegmentSubnet.Contains(ga) && network.DefaultSegmentSubnet.Contains(ya) &&
				g.IP != blue.IP && y.IP != blue.IP && !bluePresent &&
				!slices.ContainsFunc(ports, func(p string) bool { return strings.Contains(p, blueVeth) }),
			fmt.Sprintf("interfaces %+v, segment ports %v", v.Status.Interfaces, ports)
	})
	waitLauncherAgent(t, n.b, uid)
	eventually(t, 30*time.Second, "the guest's NICs on "+secondNode, func() (bool, string) {
		out := guestShell(t, n.b, vmi, "ls /sys/class/net")
		return strings.Contains(out, "eth2") && strings.Contains(out, "eth3") && !strings.Contains(out, "eth1"), out
	})
	var events eventsv1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace(vmi.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		at, since := e.EventTime.Time, plugStart
		if at.IsZero() { // whole seconds
			at, since = e.CreationTimestamp.Time, plugStart.Truncate(time.Second)
		}
		if e.Regarding.UID == vmi.UID && e.Type == "Warning" && !at.Before(since) {
			t.Errorf("Warning event %s: %s", e.Reason, e.Note)
		}
	}

	if err := removeSharedPeer(segNS); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	eventually(t, 30*time.Second, "the segment emptied", func() (bool, string) {
		links := segmentLinks(t, segNS)
		return slices.Equal(links, []string{"lo"}), fmt.Sprintf("links %v", links)
	})
}

// sharedPeer attaches a namespace of the test's to the segment's bridge in segNS with addr; it
// returns the namespace. The bridge must exist (a VMI's interface made it).
func sharedPeer(t *testing.T, segNS, addr string) string {
	t.Helper()
	path := filepath.Join(testNet.dir, "shared-peer")
	if err := createNetns(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = removeSharedPeer(segNS)
		if err := removeNetns(path); err != nil {
			t.Error(err)
		}
	})
	seg, peer := nsHandle(t, segNS), nsHandle(t, path)
	br, err := seg.LinkByName(network.DefaultSegmentBridge)
	if err != nil {
		t.Fatal(err)
	}
	pns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer pns.Close()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "peer-shared", MasterIndex: br.Attrs().Index}, PeerName: "eth0", PeerNamespace: netlink.NsFd(pns)}
	if err := seg.LinkAdd(v); err != nil {
		t.Fatal(err)
	}
	if err := seg.LinkSetUp(v); err != nil {
		t.Fatal(err)
	}
	eth0, err := peer.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := peer.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(netip.MustParsePrefix(addr))}); err != nil {
		t.Fatal(err)
	}
	if err := peer.LinkSetUp(eth0); err != nil {
		t.Fatal(err)
	}
	return path
}

// removeSharedPeer deletes the peer's veth (idempotent).
func removeSharedPeer(segNS string) error { return deleteLink(segNS, "peer-shared") }

// nsHandle is a netlink handle in namespace path, closed with the test.
func nsHandle(t *testing.T, path string) *netlink.Handle {
	t.Helper()
	ns, err := netns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// segmentLinks lists the links in the segment's namespace, sorted.
func segmentLinks(t *testing.T, segNS string) []string {
	t.Helper()
	links, _, err := netnsContents(segNS)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		out = append(out, l.Attrs().Name)
	}
	slices.Sort(out)
	return out
}

// segmentPorts lists the ports of the segment's bridge ("NAME ALIAS").
func segmentPorts(t *testing.T, segNS string) []string {
	t.Helper()
	links, _, err := netnsContents(segNS)
	if err != nil {
		t.Fatal(err)
	}
	br := slices.IndexFunc(links, func(l netlink.Link) bool { return l.Attrs().Name == network.DefaultSegmentBridge })
	var out []string
	for _, l := range links {
		if br >= 0 && l.Attrs().MasterIndex == links[br].Attrs().Index {
			out = append(out, l.Attrs().Name+" "+l.Attrs().Alias)
		}
	}
	return out
}

// stepGate holds, while armed, the first trace of step by the agent whose Trace it is: a
// migration target's launcher start (TraceLauncherExec) after the source published its layout,
// before the target's QEMU starts, until the test opens the gate.
type stepGate struct {
	step    string
	mu      sync.Mutex
	armed   bool
	reached chan struct{}
	release chan struct{}
}

// trace is an agent's Trace (agentOptions.Trace).
func (g *stepGate) trace(_ types.UID, step string, _, _ time.Time) {
	if step != g.step {
		return
	}
	g.mu.Lock()
	armed, reached, release := g.armed, g.reached, g.release
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(reached)
		select {
		case <-release:
		case <-time.After(2 * time.Minute): // a test that failed before opening it
		}
	}
}

func (g *stepGate) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.reached, g.release = true, make(chan struct{}), make(chan struct{})
}

// wait waits until the armed gate holds its step.
func (g *stepGate) wait(t *testing.T, d time.Duration) {
	t.Helper()
	g.mu.Lock()
	reached := g.reached
	g.mu.Unlock()
	select {
	case <-reached:
	case <-time.After(d):
		t.Fatalf("the gate's step %s did not come within %s", g.step, d)
	}
}

// open lets the held step go on (and any later one); opening an open or unarmed gate does
// nothing.
func (g *stepGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = false
	if g.release == nil {
		return
	}
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}
