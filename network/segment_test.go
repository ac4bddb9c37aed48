package network

import (
	"errors"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSegmentConfig: a segment needs its namespace and this node's name.
func TestSegmentConfig(t *testing.T) {
	for _, c := range []SegmentConfig{
		{Node: "a"},
		{NetnsPath: "relative", Node: "a"},
		{NetnsPath: "/run/netns/x"},
		{NetnsPath: "/run/netns/x", Node: "A B"},
		{NetnsPath: "/run/netns/x", Node: "a", Subnet: DefaultNodeSubnet6},
	} {
		if _, err := NewSegment(c); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("NewSegment(%+v) = %v, want ErrInvalidSpec", c, err)
		}
	}
	if _, err := NewSegment(SegmentConfig{NetnsPath: "/run/netns/x", Node: "node-1"}); err != nil {
		t.Errorf("NewSegment: %v", err)
	}
}

// TestSegmentAcrossNodes: two nodes (each its own namespace and pods) attach their pods to one
// segment. The pods of one VMI on both nodes (a migration's source and target) get one address
// and MAC, each its own host veth; another pod another address. Removing the first node's
// interface leaves the second's, which a pod of the first node then reaches over the segment;
// the bridge goes with the last interface; the nodes' own bridges never see the segment.
func TestSegmentAcrossNodes(t *testing.T) {
	a, b := newTestNode(t), newTestNode(t)
	segNS := newNetns(t, nsDir(t), "segment")
	segA, err := NewSegment(SegmentConfig{NetnsPath: segNS, NetnsDir: filepath.Join(a.dir, "pods"), Node: "node-a"})
	must(t, err)
	segB, err := NewSegment(SegmentConfig{NetnsPath: segNS, NetnsDir: filepath.Join(b.dir, "pods"), Node: "node-b"})
	must(t, err)
	ifname := SecondaryInterfaceName("shared")
	if _, err := segA.AddInterface("vm-1", ifname); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("AddInterface without a pod = %v", err)
	}
	for _, p := range []struct {
		n  *testNode
		id string
	}{{a, "vm-1"}, {b, "vm-1"}, {a, "vm-2"}} {
		if _, err := p.n.CreatePod(p.id); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { must(t, p.n.DeletePod(p.id)) })
	}
	src, err := segA.AddInterface("vm-1", ifname)
	must(t, err)
	dst, err := segB.AddInterface("vm-1", ifname)
	must(t, err)
	other, err := segA.AddInterface("vm-2", ifname)
	must(t, err)
	if !DefaultSegmentSubnet.Contains(src.Addr.Addr()) || src.Addr != dst.Addr || src.MAC.String() != dst.MAC.String() || src.HostVeth == dst.HostVeth {
		t.Errorf("one VMI on two nodes: %s %s %s and %s %s %s, want one address and MAC, two host veths",
			src.Addr, src.MAC, src.HostVeth, dst.Addr, dst.MAC, dst.HostVeth)
	}
	if other.Addr == src.Addr {
		t.Errorf("vm-2 got vm-1's address %s", other.Addr)
	}
	if again, err := segB.AddInterface("vm-1", ifname); err != nil || again.Addr != dst.Addr {
		t.Errorf("AddInterface again = %+v, %v", again, err)
	}
	for _, s := range []*Segment{segA, segB} {
		if got, err := s.Interfaces("vm-1"); err != nil || !slices.Equal(got, []string{ifname}) {
			t.Errorf("%s: Interfaces(vm-1) = %v, %v", s.n.tag, got, err)
		}
	}
	if got, err := a.Interfaces("vm-1"); err != nil || len(got) != 0 {
		t.Errorf("node a's own Interfaces(vm-1) = %v, %v; want none", got, err)
	}
	if links := linkNames(t, a.ns); slices.Contains(links, src.HostVeth) {
		t.Errorf("node a's namespace has the segment's veth: %v", links)
	}

	// The bridge deleted under the interfaces (by hand): the next call makes it again with
	// them as its ports, and finds each where it was.
	h, done, err := nsHandle(segNS)
	must(t, err)
	br, err := h.LinkByName(DefaultSegmentBridge)
	must(t, err)
	must(t, h.LinkDel(br))
	done()
	if again, err := segB.AddInterface("vm-1", ifname); err != nil || again.Addr != dst.Addr {
		t.Fatalf("AddInterface after the bridge was deleted = %+v, %v", again, err)
	}
	if got, err := segA.Interfaces("vm-2"); err != nil || !slices.Equal(got, []string{ifname}) {
		t.Errorf("vm-2's interface after the bridge was made again: %v, %v", got, err)
	}

	must(t, segA.RemoveInterface("vm-1", ifname))
	must(t, segA.RemoveInterface("vm-1", ifname)) // idempotent
	if got, _ := segA.Interfaces("vm-1"); len(got) != 0 {
		t.Errorf("node a still lists %v", got)
	}
	if got, _ := segB.Interfaces("vm-1"); !slices.Equal(got, []string{ifname}) {
		t.Errorf("node b lost its interface: %v", got)
	}
	podB := filepath.Join(b.dir, "pods", "vmlet-vm-1")
	ln := listenIn(t, podB, net.JoinHostPort(dst.Addr.Addr().String(), "8080"))
	serveGreeting(ln)
	podA2 := filepath.Join(a.dir, "pods", "vmlet-vm-2")
	got, err := exchange(podA2, ln.Addr().String())
	if want := "hello " + other.Addr.Addr().String() + "\n"; err != nil || got != want {
		t.Errorf("vm-2 on node a to vm-1 on node b over the segment: %q, %v; want %q", got, err, want)
	}

	must(t, segA.RemoveInterface("vm-2", ifname))
	if links := linkNames(t, segNS); !slices.Contains(links, DefaultSegmentBridge) {
		t.Errorf("the bridge went with a port left: %v", links)
	}
	must(t, segB.RemoveInterface("vm-1", ifname))
	if links := linkNames(t, segNS); slices.ContainsFunc(links, func(s string) bool { return s != "lo" }) {
		t.Errorf("segment links left: %v", links)
	}
}
