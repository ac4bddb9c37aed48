package controllers_test

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

	"github.com/google/nftables"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// secondaryNIC is a bridge interface on the local node's multus network.
func secondaryNIC(name, networkName string) (vmletv1.Interface, vmletv1.Network) {
	return vmletv1.Interface{Name: name, InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}},
		vmletv1.Network{Name: name, NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: networkName}}}
}

// patchSpec applies change to the VMI's spec with a merge patch and returns the API server's
// answer.
func patchSpec(t *testing.T, key client.ObjectKey, change func(*vmletv1.VirtualMachineInstanceSpec)) error {
	t.Helper()
	v, err := getVMI(t, key)
	if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	change(&v.Spec)
	return env.Client.Patch(context.Background(), v, patch)
}

// statusInterface returns the VMI's status.interfaces entry of name.
func statusInterface(v *vmletv1.VirtualMachineInstance, name string) (vmletv1.VirtualMachineInstanceNetworkInterface, bool) {
	for _, s := range v.Status.Interfaces {
		if s.Name == name {
			return s, true
		}
	}
	return vmletv1.VirtualMachineInstanceNetworkInterface{}, false
}

// TestVMINICHotplug: KubeVirt's declarative NIC hotplug on a running masquerade VMI. Adding a
// multus network and its bridge interface to the spec gives the pod a second interface on the
// node bridge (vmlet is the CNI in local mode), plugs a NIC into the guest, which announces it
// and gets the interface's address by DHCP; status.interfaces reports it and an event says so;
// the node reaches the guest at that address. Invalid hotplugs are rejected by the API server
// (masquerade, no network, duplicate name, bad MAC) or, for a multus network this node does
// not offer, reported (Synchronized=False UnknownNetwork, a Warning event) with nothing
// created and the VMI undisturbed. state: absent, set while no agent runs, makes the next agent
// unplug the NIC from the guest and remove every host object of it (veth, tap, bridge, table);
// deleting the VMI with a plugged NIC leaves nothing.
func TestVMINICHotplug(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	a := startAgent(t, agentOptions{})
	defer func() { a.stop(t) }()
	ctx := context.Background()
	vmi := masqueradeVMI("nic-hotplug")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	vmi, _ = waitAddress(t, key, 2*time.Minute)
	waitConsoleLine(t, vmi, testguest.MarkerIP+" eth0 10.0.2.2")
	waitSerial(t, consoleLog(vmi), testguest.MarkerReady)
	podNS := filepath.Join(testNet.cfg.NetnsDir, "vmlet-"+string(vmi.UID))
	before := hostObjects(t, podNS)

	// Invalid hotplugs: the API server refuses them; nothing reaches the node.
	ifc, nw := secondaryNIC("blue", "vmlet-node")
	masq := ifc
	masq.InterfaceBindingMethod = vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}
	badMAC := ifc
	badMAC.MacAddress = "02:00:00:00:00"
	dup, dupNet := secondaryNIC("testmasquerade", "vmlet-node")
	for _, tc := range []struct {
		name string
		ifc  vmletv1.Interface
		nets []vmletv1.Network
	}{
		{"masquerade", masq, []vmletv1.Network{nw}},
		{"no network", ifc, nil},
		{"duplicate name", dup, []vmletv1.Network{dupNet}},
		{"bad MAC", badMAC, []vmletv1.Network{nw}},
	} {
		err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, tc.ifc)
			s.Networks = append(s.Networks, tc.nets...)
		})
		if !apierrors.IsInvalid(err) {
			t.Errorf("hotplug with %s: err = %v, want 422 Invalid", tc.name, err)
		} else {
			t.Logf("hotplug with %s rejected: %v", tc.name, err)
		}
	}

	// A multus network the node does not offer: reported, nothing created, VMI undisturbed.
	unknownIfc, unknownNet := secondaryNIC("green", "no-such-network")
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, unknownIfc)
		s.Networks = append(s.Networks, unknownNet)
	}); err != nil {
		t.Fatal(err)
	}
	got := waitSynchronized(t, key, metav1.ConditionFalse, "UnknownNetwork")
	waitEvent(t, got, "UnknownNetwork")
	if got.Status.Phase != vmletv1.Running || !meta.IsStatusConditionTrue(got.Status.Conditions, vmletv1.VirtualMachineInstanceReady) {
		t.Errorf("an unknown network disturbed the VMI: %s", summary(got))
	}
	assertHostObjects(t, "after an unknown network", podNS, before)
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = s.Domain.Devices.Interfaces[:1]
		s.Networks = s.Networks[:1]
	}); err != nil {
		t.Fatal(err)
	}
	waitSynchronized(t, key, metav1.ConditionTrue, "Synced")

	// Hotplug.
	t0 := time.Now()
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, ifc)
		s.Networks = append(s.Networks, nw)
	}); err != nil {
		t.Fatal(err)
	}
	var blue vmletv1.VirtualMachineInstanceNetworkInterface
	eventually(t, 2*time.Minute, "hotplugged interface's address in status.interfaces", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		blue, _ = statusInterface(v, "blue")
		return blue.IP != "", fmt.Sprintf("%s interfaces=%+v", summary(v), v.Status.Interfaces)
	})
	t.Logf("spec patched → hotplugged interface's address %s in status: %s", blue.IP, time.Since(t0).Round(time.Millisecond))
	addr, err := netip.ParseAddr(blue.IP)
	if err != nil || !network.DefaultNodeSubnet.Contains(addr) || addr.String() == got.Status.Interfaces[0].IP {
		t.Fatalf("hotplugged interface's address %q: want another address of %s", blue.IP, network.DefaultNodeSubnet)
	}
	if blue.PodInterfaceName != network.SecondaryInterfaceName("blue") || blue.MAC == "" {
		t.Errorf("status of the hotplugged interface: %+v", blue)
	}
	if first := got.Status.Interfaces[0]; first.Name != "testmasquerade" || first.IP == "" {
		t.Errorf("the pod network's interface changed: %+v", first)
	}
	waitConsoleMarker(t, got, testguest.MarkerNICAdded+" eth1")
	waitConsoleMarker(t, got, testguest.MarkerIP+" eth1 "+blue.IP)
	waitNormalEvent(t, got, "InterfaceAttached")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized) {
		t.Errorf("after the hotplug: %s", summary(got))
	}
	plugged := hostObjects(t, podNS)
	hash := network.SecondaryInterfaceName("blue")[3:]
	for _, want := range []string{"link " + network.SecondaryInterfaceName("blue"), "link k6t-" + hash, "link tap" + hash, "table bridge vmlet-blue"} {
		if !slices.Contains(plugged.pod, want) {
			t.Errorf("pod netns lacks %s: %v", want, plugged.pod)
		}
	}
	if len(plugged.node) != len(before.node)+1 {
		t.Errorf("node links %v, want one more than %v", plugged.node, before.node)
	}
	// The node reaches the guest directly on the secondary network.
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
	guestServe(t, a, got, 80, "VMLET-HELLO-SECONDARY")
	waitReply(t, testNet.node, netip.AddrPortFrom(addr, 80), "VMLET-HELLO-SECONDARY\n")
	if served := launcherDHCP(t, a, got); !slices.Equal(served, []string{"blue", "testmasquerade"}) {
		t.Errorf("the launcher serves DHCP on %v, want [blue testmasquerade]", served)
	}

	// The hotplugged interface's DHCP lives with the VM too: with no agent running the guest
	// renews its lease on eth1.
	a.stop(t)
	renewed := leaseLinesOn(got, "eth1")
	guestShell(t, a, got, "kill -USR1 $(cat /run/udhcpc.eth1.pid)")
	eventually(t, time.Minute, "eth1 lease renewed with no agent running", func() (bool, string) {
		n := leaseLinesOn(got, "eth1")
		return n > renewed, fmt.Sprintf("%d eth1 address lines", n)
	})

	// Hot-unplug (state: absent) while no agent runs: the next agent finds the NIC in the
	// domain and the binding in the pod only in the kernel, and removes both, and the
	// launcher's DHCP service of it.
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces[1].State = vmletv1.InterfaceStateAbsent
	}); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	a = startAgent(t, agentOptions{})
	waitConsoleMarker(t, got, testguest.MarkerNICRemoved+" eth1")
	eventually(t, time.Minute, "unplugged interface gone from status.interfaces", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		_, present := statusInterface(v, "blue")
		return !present && len(v.Status.Interfaces) == 1, fmt.Sprintf("%+v", v.Status.Interfaces)
	})
	t.Logf("agent restart after state: absent → NIC gone from the guest and the status: %s", time.Since(t0).Round(time.Millisecond))
	waitNormalEvent(t, got, "InterfaceDetached")
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, time.Minute)
	if out := guestShell(t, a, got, "ls /sys/class/net"); strings.Contains(out, "eth1") {
		t.Errorf("the guest still has eth1: %s", out)
	}
	assertHostObjects(t, "after the unplug", podNS, before)
	eventually(t, 10*time.Second, "the unplugged interface's DHCP stopped", func() (bool, string) {
		served := launcherDHCP(t, a, got)
		return slices.Equal(served, []string{"testmasquerade"}), fmt.Sprintf("served %v", served)
	})
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = s.Domain.Devices.Interfaces[:1]
		s.Networks = s.Networks[:1]
	}); err != nil {
		t.Fatalf("remove the unplugged interface: %v", err)
	}

	// Plug it again, then delete the VMI with it: nothing is left.
	if err := patchSpec(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces, ifc)
		s.Networks = append(s.Networks, nw)
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "re-plugged interface's address", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		s, _ := statusInterface(v, "blue")
		return s.IP != "", fmt.Sprintf("%+v", v.Status.Interfaces)
	})
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, string(vmi.UID))
	assertNoPodNetwork(t, string(vmi.UID))
	assertNodeNetworkGone(t)
}

// waitConsoleMarker waits for a console line ending in marker (the shell's prompt may precede
// markers printed after boot).
func waitConsoleMarker(t *testing.T, v *vmletv1.VirtualMachineInstance, marker string) {
	t.Helper()
	eventually(t, time.Minute, v.Name+" console marker "+marker, func() (bool, string) {
		b, err := os.ReadFile(consoleLog(v))
		return err == nil && slices.ContainsFunc(strings.Split(strings.ReplaceAll(string(b), "\r", ""), "\n"), func(l string) bool {
			return strings.HasSuffix(l, marker)
		}), tail(b)
	})
}

// waitSynchronized waits for the VMI's Synchronized condition with status and reason.
func waitSynchronized(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, reason string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	var got *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, fmt.Sprintf("Synchronized=%s %s", status, reason), func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		got = v
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Status == status && c.Reason == reason, summary(v)
	})
	return got
}

// hostState is what a VMI's network consists of on the node: "link NAME" and "table FAMILY
// NAME" entries of its pod netns, and the node netns' links.
type hostState struct {
	pod, node []string
}

func hostObjects(t *testing.T, podNS string) hostState {
	t.Helper()
	pod, err := nsObjects(podNS)
	if err != nil {
		t.Fatal(err)
	}
	all, _, err := nodeState()
	if err != nil {
		t.Fatal(err)
	}
	// Test clients' uplinks (up-*) belong to other tests running at the same time (addClient),
	// not to this VMI: one appearing or going away mid-test says nothing about a leak.
	var links []string
	for _, l := range all {
		if !strings.HasPrefix(l, "up-") {
			links = append(links, l)
		}
	}
	slices.Sort(links)
	return hostState{pod: pod, node: links}
}

func assertHostObjects(t *testing.T, when, podNS string, want hostState) {
	t.Helper()
	got := hostObjects(t, podNS)
	if !slices.Equal(got.pod, want.pod) {
		t.Errorf("%s: pod netns holds %v, want %v", when, got.pod, want.pod)
	}
	if !slices.Equal(got.node, want.node) {
		t.Errorf("%s: node links %v, want %v", when, got.node, want.node)
	}
}

// nsObjects lists the links and nftables tables of the netns at path, sorted.
func nsObjects(path string) ([]string, error) {
	ls, ts, err := netnsContents(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		out = append(out, "link "+l.Attrs().Name)
	}
	for _, tb := range ts {
		fam := map[nftables.TableFamily]string{nftables.TableFamilyINet: "inet", nftables.TableFamilyBridge: "bridge", nftables.TableFamilyIPv4: "ip", nftables.TableFamilyIPv6: "ip6"}[tb.Family]
		out = append(out, "table "+fam+" "+tb.Name)
	}
	slices.Sort(out)
	return out, nil
}

// podVeths lists the node links whose alias says they belong to pod uid (its eth0 and any
// secondary interface).
func podVeths(uid string) ([]string, error) {
	ls, _, err := netnsContents(testNet.node)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		if strings.HasPrefix(l.Attrs().Alias, "vmlet-pod "+uid+" ") {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}
