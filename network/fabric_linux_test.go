package network

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vmlet/vmlet/test/prereq"
)

// testFabric is a fabric whose namespaces, uplink included, all belong to the test: the
// "host" the uplink lives in is a namespace too, with an "outside" namespace behind it
// (203.0.113.0/24) to check the egress masquerade. Nothing touches the host's namespace.
type testFabric struct {
	cfg     FabricConfig
	dir     string
	uplink  string // the uplink's netns (the fabric's "host")
	outside string // behind the uplink: 203.0.113.2
}

func newTestFabric(t *testing.T) *testFabric {
	t.Helper()
	prereq.Root(t)
	rootBefore := rootLinkNames(t)
	dir := nsDir(t)
	tf := &testFabric{dir: dir, uplink: newNetns(t, dir, "uplink"), outside: newNetns(t, dir, "outside")}
	tf.cfg = FabricConfig{NetnsDir: dir, Name: "vmtest", UplinkNetns: tf.uplink}
	// The uplink namespace's own way out: a veth to "outside" (.1 uplink side, .2 outside).
	h, done, err := nsHandle(tf.uplink)
	must(t, err)
	defer done()
	l, err := addVeth(h, "eth0", "eth0", tf.outside, 1500, 0)
	must(t, err)
	must(t, h.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(netip.MustParsePrefix("203.0.113.1/24"))}))
	must(t, h.LinkSetUp(l))
	oh, odone, err := nsHandle(tf.outside)
	must(t, err)
	defer odone()
	ol, err := oh.LinkByName("eth0")
	must(t, err)
	must(t, oh.AddrAdd(ol, &netlink.Addr{IPNet: prefixNet(netip.MustParsePrefix("203.0.113.2/24"))}))
	must(t, oh.LinkSetUp(ol))
	t.Cleanup(func() {
		if h, done, err := nsHandle(tf.uplink); err == nil {
			must(t, deleteLinkByName(h, "eth0"))
			done()
		}
		must(t, RemoveFabric(tf.cfg)) // after a failure too; a no-op after a clean run
		for _, n := range rootLinkNames(t) {
			if !slices.Contains(rootBefore, n) && (n == tf.cfg.Name+"-fabric" || len(n) == 15 && n[:3] == fabricPortPrefix) {
				t.Errorf("link %s appeared in the host namespace", n)
			}
		}
	})
	return tf
}

// podNode is node n's pod network (vmlet's Node) as local mode makes it on the fabric: pod
// subnet from the fabric, no masquerade on the node, pod namespaces in a folder per node.
func (tf *testFabric) podNode(t *testing.T, n FabricNode) *Node {
	t.Helper()
	podDir := filepath.Join(tf.dir, "pods-"+n.Name)
	node, err := NewNode(NodeConfig{NetnsPath: n.NetnsPath, Subnet: n.PodSubnet, NetnsDir: podDir, NoMasquerade: true})
	must(t, err)
	t.Cleanup(func() {
		ents, _ := os.ReadDir(podDir)
		for _, e := range ents {
			must(t, removeNetns(filepath.Join(podDir, e.Name())))
		}
	})
	return node
}

// greet dials addr from netns ns with DialTCP and returns the greeting (serveGreeting).
func greet(ns, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialTCP(ctx, ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func listenTCP(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	ln, err := ListenTCP(ns, addr)
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln
}

// TestFabric: two nodes on a fabric, each with a pod of the same id (as a migration's source
// and target hold); pod A reaches pod B and node A reaches node B un-NATed, pod A reaches the
// uplink un-NATed and the outside masqueraded; EnsureFabric is idempotent; RemoveFabric leaves
// no namespace, link or table behind and may run twice.
func TestFabric(t *testing.T) {
	tf := newTestFabric(t)
	uplinkLinks, uplinkTables := linkNames(t, tf.uplink), tableNames(t, tf.uplink)
	nodes, err := EnsureFabric(tf.cfg, []string{"a", "b"})
	must(t, err)
	fabLinks := linkNames(t, tf.cfg.fabricNetns())
	again, err := EnsureFabric(tf.cfg, []string{"a", "b"})
	must(t, err)
	if !slices.EqualFunc(nodes, again, func(x, y FabricNode) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
		t.Errorf("EnsureFabric again = %+v, want %+v", again, nodes)
	}
	if got := linkNames(t, tf.cfg.fabricNetns()); !slices.Equal(got, fabLinks) {
		t.Errorf("fabric links after a second EnsureFabric = %v, want %v", got, fabLinks)
	}
	if got := tableNames(t, tf.uplink); !slices.Contains(got, "inet vmtest_fabric") {
		t.Errorf("uplink tables = %v, want inet vmtest_fabric", got)
	}
	a, b := nodes[0], nodes[1]

	// node A -> node B over the fabric.
	serveGreeting(listenTCP(t, b.NetnsPath, netip.AddrPortFrom(b.Addr, 7100).String()))
	if got, err := greet(a.NetnsPath, netip.AddrPortFrom(b.Addr, 7100).String()); err != nil || got != fmt.Sprintf("hello %s\n", a.Addr) {
		t.Errorf("node a -> node b: %q, %v; want hello %s", got, err, a.Addr)
	}

	na, nb := tf.podNode(t, a), tf.podNode(t, b)
	const uid = "0b7c3d4e-same-uid"
	pa, err := na.CreatePod(uid)
	must(t, err)
	pb, err := nb.CreatePod(uid)
	must(t, err)
	if pa.NetnsPath == pb.NetnsPath || !a.PodSubnet.Contains(pa.Addr.Addr()) || !b.PodSubnet.Contains(pb.Addr.Addr()) {
		t.Fatalf("pods %+v and %+v: want one per node, in the node's pod subnet", pa, pb)
	}

	// pod A -> pod B: routed via node B, no NAT.
	serveGreeting(listenTCP(t, pb.NetnsPath, ":7101"))
	if got, err := greet(pa.NetnsPath, netip.AddrPortFrom(pb.Addr.Addr(), 7101).String()); err != nil || got != fmt.Sprintf("hello %s\n", pa.Addr.Addr()) {
		t.Errorf("pod a -> pod b: %q, %v; want hello %s", got, err, pa.Addr.Addr())
	}
	// pod A -> the uplink (the host): inside the fabric subnet, no NAT.
	serveGreeting(listenTCP(t, tf.uplink, netip.AddrPortFrom(a.Gateway, 7102).String()))
	if got, err := greet(pa.NetnsPath, netip.AddrPortFrom(a.Gateway, 7102).String()); err != nil || got != fmt.Sprintf("hello %s\n", pa.Addr.Addr()) {
		t.Errorf("pod a -> uplink: %q, %v; want hello %s", got, err, pa.Addr.Addr())
	}
	// pod B -> outside: masqueraded by the uplink.
	serveGreeting(listenTCP(t, tf.outside, ":7103"))
	if got, err := greet(pb.NetnsPath, "203.0.113.2:7103"); err != nil || got != "hello 203.0.113.1\n" {
		t.Errorf("pod b -> outside: %q, %v; want hello 203.0.113.1 (uplink masquerade)", got, err)
	}

	must(t, na.DeletePod(uid))
	must(t, nb.DeletePod(uid))
	must(t, RemoveFabric(tf.cfg))
	must(t, RemoveFabric(tf.cfg))
	ents, err := os.ReadDir(tf.dir)
	must(t, err)
	for _, e := range ents {
		kept := slices.Contains([]string{"uplink", "outside"}, e.Name()) || e.IsDir() && slices.Contains([]string{"pods-a", "pods-b"}, e.Name())
		if n := e.Name(); !kept {
			t.Errorf("left in the netns folder: %s", n)
		}
	}
	if got := linkNames(t, tf.uplink); !slices.Equal(got, uplinkLinks) {
		t.Errorf("uplink links after RemoveFabric = %v, want %v", got, uplinkLinks)
	}
	if got := tableNames(t, tf.uplink); !slices.Equal(got, uplinkTables) {
		t.Errorf("uplink tables after RemoveFabric = %v, want %v", got, uplinkTables)
	}
}

// TestFabricRemoveDirty: RemoveFabric cleans a fabric whose pods were never deleted and
// EnsureFabric replaces a node whose namespace was recreated behind its back.
func TestFabricRemoveDirty(t *testing.T) {
	tf := newTestFabric(t)
	uplinkLinks := linkNames(t, tf.uplink)
	nodes, err := EnsureFabric(tf.cfg, []string{"a", "b"})
	must(t, err)
	must(t, removeNetns(nodes[1].NetnsPath)) // node b's namespace vanishes (its veth end with it, eventually)
	nodes, err = EnsureFabric(tf.cfg, []string{"a", "b"})
	must(t, err)
	serveGreeting(listenTCP(t, nodes[1].NetnsPath, netip.AddrPortFrom(nodes[1].Addr, 7104).String()))
	if got, err := greet(nodes[0].NetnsPath, netip.AddrPortFrom(nodes[1].Addr, 7104).String()); err != nil || got != fmt.Sprintf("hello %s\n", nodes[0].Addr) {
		t.Errorf("node a -> recreated node b: %q, %v", got, err)
	}
	na := tf.podNode(t, nodes[0])
	_, err = na.CreatePod("left-behind")
	must(t, err)
	must(t, RemoveFabric(tf.cfg))
	if _, err := os.Stat(tf.cfg.fabricNetns()); !os.IsNotExist(err) {
		t.Errorf("fabric netns still there: %v", err)
	}
	if got := linkNames(t, tf.uplink); !slices.Equal(got, uplinkLinks) {
		t.Errorf("uplink links after RemoveFabric = %v, want %v", got, uplinkLinks)
	}
}
