package network

import (
	"net/netip"
	"slices"
	"testing"
)

// withSecondary is spec plus a bridge interface "blue" on the secondary network attachment
// "vmlet-node".
func withSecondary(spec *Spec) *Spec {
	s := *spec
	s.Interfaces = append(slices.Clone(spec.Interfaces), Interface{Name: "blue", Binding: BindingBridge})
	s.Networks = append(slices.Clone(spec.Networks), Network{Name: "blue", Attachment: "vmlet-node"})
	return &s
}

// TestSecondaryInterface: a pod interface added to a running pod (Node.AddInterface, the
// local-mode stand-in for a Multus attachment) is wired with the bridge binding next to the
// pod network's binding (Attachment.AddInterface): a guest on its tap's bridge gets the added
// interface's address by DHCP and no router; removing it (RemoveInterface on both sides, also
// from an attachment that did not add it, as after an agent restart) leaves the pod and node
// namespaces exactly as before; adding is idempotent.
func TestSecondaryInterface(t *testing.T) {
	tn := newTestNode(t)
	pod, err := tn.CreatePod("vm-s")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-s")) })
	a := attach(t, pod, bridgeSpec("vm-s"))
	podLinks, podTables, nodeLinks := linkNames(t, pod.NetnsPath), tableNames(t, pod.NetnsPath), linkNames(t, tn.ns)

	ifname := SecondaryInterfaceName("blue")
	sec, err := tn.AddInterface("vm-s", ifname)
	must(t, err)
	if again, err := tn.AddInterface("vm-s", ifname); err != nil || again.Addr != sec.Addr {
		t.Fatalf("AddInterface again = %+v, %v; want %s", again, err, sec.Addr)
	}
	if sec.Addr == pod.Addr || !DefaultNodeSubnet.Contains(sec.Addr.Addr()) {
		t.Fatalf("secondary address %s (pod %s)", sec.Addr, pod.Addr)
	}
	if got, err := tn.Interfaces("vm-s"); err != nil || !slices.Equal(got, []string{ifname}) {
		t.Errorf("Interfaces = %v, %v", got, err)
	}
	spec := withSecondary(bridgeSpec("vm-s"))
	ip, err := a.AddInterface(spec, "blue")
	must(t, err)
	if again, err := a.AddInterface(spec, "blue"); err != nil || again.Tap != ip.Tap {
		t.Errorf("AddInterface again = %+v, %v", again, err)
	}
	if ip.Bridge != "k6t-"+ifname[3:] || ip.Tap != "tap"+ifname[3:] || ip.Table.Name != "vmlet-blue" || !slices.Equal(ip.MAC, sec.MAC) {
		t.Errorf("secondary plan: bridge %s tap %s table %s mac %s (pod side mac %s)", ip.Bridge, ip.Tap, ip.Table.Name, ip.MAC, sec.MAC)
	}
	guestNS := fakeGuest(t, tn.dir, pod.NetnsPath, ip.Bridge, ip.MAC)
	lease := dhcpLease(t, guestNS, "")
	if got := lease.ACK.YourIPAddr.String(); got != sec.Addr.Addr().String() {
		t.Errorf("secondary lease %s, want %s", got, sec.Addr.Addr())
	}
	if rs := lease.ACK.Router(); len(rs) != 0 {
		t.Errorf("a secondary network offered routers %v", rs)
	}
	st := a.Status(a.Leases())
	if len(st) != 2 || st[1].Name != "blue" || !slices.Equal(st[1].IPs, []netip.Addr{sec.Addr.Addr()}) || st[1].PodInterface != ifname {
		t.Errorf("Status = %+v", st)
	}
	deleteLink(t, pod.NetnsPath, "fg0")

	must(t, a.RemoveInterface("blue"))
	must(t, tn.RemoveInterface("vm-s", ifname))
	assertNames(t, "pod links", linkNames(t, pod.NetnsPath), podLinks)
	assertNames(t, "pod tables", tableNames(t, pod.NetnsPath), podTables)
	assertNames(t, "node links", linkNames(t, tn.ns), nodeLinks)

	// An attachment that did not add the interface (a restarted agent's) removes it by its
	// links' alias.
	_, err = tn.AddInterface("vm-s", ifname)
	must(t, err)
	_, err = a.AddInterface(spec, "blue")
	must(t, err)
	b, err := Attach(pod.NetnsPath, bridgeSpec("vm-s"), AttachOptions{ServeDHCP: true})
	must(t, err)
	if names, err := b.Interfaces(); err != nil || !slices.Contains(names, "blue") {
		t.Errorf("restarted attachment's Interfaces = %v, %v", names, err)
	}
	must(t, a.Close())
	must(t, b.RemoveInterface("blue"))
	must(t, tn.RemoveInterface("vm-s", ifname))
	must(t, b.Close())
	assertNames(t, "pod links after orphan removal", linkNames(t, pod.NetnsPath), podLinks)
	assertNames(t, "pod tables after orphan removal", tableNames(t, pod.NetnsPath), podTables)
	assertNames(t, "node links after orphan removal", linkNames(t, tn.ns), nodeLinks)
}

// TestSecondaryInterfaceInvalid: a secondary network with the masquerade binding, a pod that
// does not exist and a bad interface name are refused, and nothing is created.
func TestSecondaryInterfaceInvalid(t *testing.T) {
	tn := newTestNode(t)
	pod, err := tn.CreatePod("vm-i")
	must(t, err)
	t.Cleanup(func() { must(t, tn.DeletePod("vm-i")) })
	a := attach(t, pod, bridgeSpec("vm-i"))
	podLinks, nodeLinks := linkNames(t, pod.NetnsPath), linkNames(t, tn.ns)
	masq := withSecondary(bridgeSpec("vm-i"))
	masq.Interfaces[1].Binding = BindingMasquerade
	if _, err := a.AddInterface(masq, "blue"); err == nil {
		t.Error("masquerade on a secondary network accepted")
	}
	if _, err := a.AddInterface(withSecondary(bridgeSpec("vm-i")), "blue"); err == nil {
		t.Error("a secondary interface without its pod interface accepted")
	}
	if _, err := tn.AddInterface("no-such-pod", SecondaryInterfaceName("blue")); err == nil {
		t.Error("AddInterface to a missing pod accepted")
	}
	if _, err := tn.AddInterface("vm-i", "eth0"); err == nil {
		t.Error("AddInterface eth0 accepted")
	}
	assertNames(t, "pod links", linkNames(t, pod.NetnsPath), podLinks)
	assertNames(t, "node links", linkNames(t, tn.ns), nodeLinks)
}

func assertNames(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
