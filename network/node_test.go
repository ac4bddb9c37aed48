package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestNodePods: two pods get distinct addresses and reach each other over the node bridge
// and the outside through the node's masquerade; CreatePod is idempotent; deleting one pod
// leaves the other working; deleting the last removes the bridge and the NAT table.
func TestNodePods(t *testing.T) {
	tn := newTestNode(t)
	remoteNS, remoteIP := attachHost(t, tn, "remote", remoteNet)
	baseLinks := linkNames(t, tn.ns)

	a, err := tn.CreatePod("pod-a")
	must(t, err)
	b, err := tn.CreatePod("pod-b")
	must(t, err)
	if a.Addr == b.Addr {
		t.Fatalf("both pods got %s", a.Addr)
	}
	for _, p := range []PodNetwork{a, b} {
		if !DefaultNodeSubnet.Contains(p.Addr.Addr()) || p.Gateway != netip.MustParseAddr("198.19.118.1") {
			t.Errorf("pod %s: addr %s gw %s, want inside %s via .1", p.ID, p.Addr, p.Gateway, DefaultNodeSubnet)
		}
	}
	again, err := tn.CreatePod("pod-a")
	must(t, err)
	if again.Addr != a.Addr || again.NetnsPath != a.NetnsPath || again.HostVeth != a.HostVeth {
		t.Errorf("CreatePod again = %+v, want %+v", again, a)
	}
	if pods, err := tn.Pods(); err != nil || len(pods) != 2 {
		t.Errorf("Pods() = %v, %v; want 2 pods", pods, err)
	}
	if got := tableNames(t, tn.ns); !slices.Equal(got, []string{"inet " + DefaultNodeTable}) {
		t.Errorf("node tables = %v", got)
	}

	// pod b -> pod a over the bridge: no NAT inside the subnet.
	serveGreeting(listenIn(t, a.NetnsPath, ":7000"))
	got, err := exchange(b.NetnsPath, netip.AddrPortFrom(a.Addr.Addr(), 7000).String())
	if want := fmt.Sprintf("hello %s\n", b.Addr.Addr()); err != nil || got != want {
		t.Errorf("pod b -> pod a: %q, %v; want %q", got, err, want)
	}
	// pod a -> remote: masqueraded to the node's uplink address.
	serveGreeting(listenIn(t, remoteNS, ":7001"))
	got, err = exchange(a.NetnsPath, netip.AddrPortFrom(remoteIP, 7001).String())
	if want := "hello 198.51.100.1\n"; err != nil || got != want {
		t.Errorf("pod a -> remote: %q, %v; want %q (node masquerade)", got, err, want)
	}

	must(t, tn.DeletePod("pod-a"))
	must(t, tn.DeletePod("pod-a")) // idempotent
	if _, err := os.Stat(a.NetnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod a netns still there: %v", err)
	}
	if links := linkNames(t, tn.ns); slices.Contains(links, a.HostVeth) || !slices.Contains(links, b.HostVeth) {
		t.Errorf("after deleting pod a, node links = %v", links)
	}
	got, err = exchange(b.NetnsPath, netip.AddrPortFrom(remoteIP, 7001).String())
	if err != nil || got != "hello 198.51.100.1\n" {
		t.Errorf("pod b -> remote after deleting pod a: %q, %v", got, err)
	}
	c, err := tn.CreatePod("pod-c") // reuses pod a's free address
	must(t, err)
	if c.Addr != a.Addr {
		t.Errorf("pod c got %s, want the freed %s", c.Addr, a.Addr)
	}
	must(t, tn.DeletePod("pod-c"))
	must(t, tn.DeletePod("pod-b"))
	if links := linkNames(t, tn.ns); !slices.Equal(links, baseLinks) {
		t.Errorf("node links after deleting every pod = %v, want %v", links, baseLinks)
	}
	if got := tableNames(t, tn.ns); len(got) != 0 {
		t.Errorf("node tables after deleting every pod = %v", got)
	}
}

// TestNodeSubnetConflict: a node subnet that overlaps a route of the node is refused before
// anything is created.
func TestNodeSubnetConflict(t *testing.T) {
	tn := newTestNode(t)
	attachHost(t, tn, "lan", netip.MustParsePrefix("198.19.118.0/25"))
	before := linkNames(t, tn.ns)
	_, err := tn.CreatePod("pod-a")
	if !errors.Is(err, ErrSubnetConflict) {
		t.Fatalf("CreatePod = %v, want ErrSubnetConflict", err)
	}
	if links := linkNames(t, tn.ns); !slices.Equal(links, before) {
		t.Errorf("links after refused CreatePod = %v, want %v", links, before)
	}
	if ents, _ := os.ReadDir(tn.Config().NetnsDir); len(ents) > 0 {
		t.Errorf("pod netns created: %v", ents)
	}
}

// TestNodeNameCollision: a foreign link with a pod's veth name is not taken over, and a
// failed CreatePod leaves nothing of its own behind.
func TestNodeNameCollision(t *testing.T) {
	tn := newTestNode(t)
	h, done, err := nsHandle(tn.ns)
	must(t, err)
	t.Cleanup(done)
	foreign := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVethName("pod-a")}, PeerName: "foreign-peer"}
	must(t, h.LinkAdd(foreign))
	t.Cleanup(func() { must(t, h.LinkDel(foreign)) })
	before := linkNames(t, tn.ns)
	if _, err := tn.CreatePod("pod-a"); !errors.Is(err, ErrNameCollision) {
		t.Fatalf("CreatePod = %v, want ErrNameCollision", err)
	}
	if links := linkNames(t, tn.ns); !slices.Equal(links, before) {
		t.Errorf("links after failed CreatePod = %v, want %v (bridge reverted)", links, before)
	}
	if ents, _ := os.ReadDir(tn.Config().NetnsDir); len(ents) > 0 {
		t.Errorf("pod netns left after failed CreatePod: %v", ents)
	}
	if err := tn.DeletePod("pod-a"); !errors.Is(err, ErrNameCollision) {
		t.Errorf("DeletePod of a foreign link = %v, want ErrNameCollision", err)
	}
	if got := tableNames(t, tn.ns); len(got) != 0 {
		t.Errorf("tables after failed CreatePod = %v", got)
	}
}

// TestNodeConcurrentPods: pods created at the same time get distinct addresses.
func TestNodeConcurrentPods(t *testing.T) {
	tn := newTestNode(t)
	const n = 8
	addrs := make(chan netip.Prefix, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			p, err := tn.CreatePod(fmt.Sprintf("pod-%d", i))
			addrs <- p.Addr
			errs <- err
		}()
	}
	seen := map[netip.Prefix]bool{}
	for range n {
		must(t, <-errs)
		a := <-addrs
		if seen[a] {
			t.Errorf("address %s given twice", a)
		}
		seen[a] = true
	}
	for i := range n {
		must(t, tn.DeletePod(fmt.Sprintf("pod-%d", i)))
	}
}

// TestNodeBridgeDeleted: the node bridge deleted under running pods (by hand, or by a host
// network reset) is made again by the next CreatePod, which attaches the pods' veths to it
// again: they keep their addresses and reach each other; it used to refuse the pod's own veth
// as "taken by another owner" and leave the VMI's network broken.
func TestNodeBridgeDeleted(t *testing.T) {
	tn := newTestNode(t)
	a, err := tn.CreatePod("pod-a")
	must(t, err)
	b, err := tn.CreatePod("pod-b")
	must(t, err)
	h, done, err := nsHandle(tn.ns)
	must(t, err)
	t.Cleanup(done)
	br, err := h.LinkByName(tn.Config().Bridge)
	must(t, err)
	must(t, h.LinkDel(br))

	again, err := tn.CreatePod("pod-a")
	if err != nil {
		t.Fatalf("CreatePod after the bridge was deleted: %v", err)
	}
	if again.Addr != a.Addr || again.HostVeth != a.HostVeth {
		t.Errorf("CreatePod again = %+v, want %+v", again, a)
	}
	br, err = h.LinkByName(tn.Config().Bridge)
	must(t, err)
	for _, p := range []PodNetwork{a, b} {
		l, err := h.LinkByName(p.HostVeth)
		must(t, err)
		if l.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("pod %s: veth %s not a port of the new bridge", p.ID, p.HostVeth)
		}
	}
	serveGreeting(listenIn(t, a.NetnsPath, ":7000"))
	got, err := exchange(b.NetnsPath, netip.AddrPortFrom(a.Addr.Addr(), 7000).String())
	if want := fmt.Sprintf("hello %s\n", b.Addr.Addr()); err != nil || got != want {
		t.Errorf("pod b -> pod a over the new bridge: %q, %v; want %q", got, err, want)
	}
	must(t, tn.DeletePod("pod-a"))
	must(t, tn.DeletePod("pod-b"))
	if _, err := h.LinkByName(tn.Config().Bridge); err == nil {
		t.Error("bridge left after the last pod")
	}
}

// TestNodeInterruptedCreate: a CreatePod stopped between making the veth and setting its alias
// (an agent killed there: TestFaultMatrix in CI) left a veth with no alias whose peer is in the
// pod's netns; the next CreatePod makes it again instead of refusing it as another owner's.
func TestNodeInterruptedCreate(t *testing.T) {
	tn := newTestNode(t)
	a, err := tn.CreatePod("pod-a")
	must(t, err)
	h, done, err := nsHandle(tn.ns)
	must(t, err)
	t.Cleanup(done)
	l, err := h.LinkByName(a.HostVeth)
	must(t, err)
	must(t, h.LinkSetAlias(l, ""))
	if l, err = h.LinkByName(a.HostVeth); err != nil || l.Attrs().Alias != "" {
		t.Fatalf("alias not cleared: %v %q", err, l.Attrs().Alias)
	}
	again, err := tn.CreatePod("pod-a")
	if err != nil {
		t.Fatalf("CreatePod after an interrupted one: %v", err)
	}
	if again.HostVeth != a.HostVeth || !podSideExists(again) {
		t.Errorf("CreatePod again = %+v", again)
	}
	if pods, err := tn.Pods(); err != nil || len(pods) != 1 || pods[0].ID != "pod-a" {
		t.Errorf("Pods() = %+v, %v; want pod-a", pods, err)
	}
	must(t, tn.DeletePod("pod-a"))
}

// TestNodeBridgeRepaired: the node bridge deleted under running pods is made again by the
// node's watch (the kernel's deletion event), with every pod veth as its port and traffic
// between the pods flowing, without any new pod; RepairBridge then has nothing to do, and with
// no pods left no bridge is made.
func TestNodeBridgeRepaired(t *testing.T) {
	tn := newTestNode(t)
	a, err := tn.CreatePod("pod-a")
	must(t, err)
	b, err := tn.CreatePod("pod-b")
	must(t, err)
	h, done, err := nsHandle(tn.ns)
	must(t, err)
	t.Cleanup(done)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan error, 8)
	watched := make(chan error, 1)
	go func() { watched <- tn.WatchBridge(ctx, time.Hour, func(err error) { reports <- err }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-watched; err != nil {
			t.Errorf("WatchBridge: %v", err)
		}
	})
	br, err := h.LinkByName(tn.Config().Bridge)
	must(t, err)
	must(t, h.LinkDel(br))
	select {
	case err := <-reports:
		if err != nil {
			t.Fatalf("repair: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted bridge was not made again")
	}
	br, err = h.LinkByName(tn.Config().Bridge)
	must(t, err)
	for _, p := range []PodNetwork{a, b} {
		l, err := h.LinkByName(p.HostVeth)
		must(t, err)
		if l.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("pod %s: veth %s not a port of the new bridge", p.ID, p.HostVeth)
		}
	}
	serveGreeting(listenIn(t, a.NetnsPath, ":7000"))
	got, err := exchange(b.NetnsPath, netip.AddrPortFrom(a.Addr.Addr(), 7000).String())
	if want := fmt.Sprintf("hello %s\n", b.Addr.Addr()); err != nil || got != want {
		t.Errorf("pod b -> pod a over the repaired bridge: %q, %v; want %q", got, err, want)
	}
	if made, err := tn.RepairBridge(); made || err != nil {
		t.Errorf("RepairBridge with the bridge there: %v, %v", made, err)
	}
	must(t, tn.DeletePod("pod-a"))
	must(t, tn.DeletePod("pod-b"))
	if made, err := tn.RepairBridge(); made || err != nil {
		t.Errorf("RepairBridge with no pods: %v, %v", made, err)
	}
	if _, err := h.LinkByName(tn.Config().Bridge); err == nil {
		t.Error("a bridge made with no pods")
	}
}
