package network

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vmlet/vmlet/test/prereq"
	"golang.org/x/sys/unix"
)

// Test topology. Every address below lives only inside namespaces the test creates (traffic
// rule: nothing may leave the machine or touch the host's namespace):
//
//	client ns (203.0.113.2) ──veth── node ns (203.0.113.1 | 198.51.100.1) ──veth── remote ns (198.51.100.2)
//	                                  │ bridge vmlet0 198.19.118.1/24 + nft masquerade
//	                                  └── pods: netns vmlet-ID, eth0 198.19.118.N
var (
	clientNet  = netip.MustParsePrefix("203.0.113.0/24")
	remoteNet  = netip.MustParsePrefix("198.51.100.0/24")
	clientNet6 = netip.MustParsePrefix("2001:db8:c::/64") // documentation prefixes (RFC 3849)
	remoteNet6 = netip.MustParsePrefix("2001:db8:e::/64")
)

// testNode is a node network living in a namespace of the test's own.
type testNode struct {
	*Node
	ns  string // the node's netns path
	dir string // folder of the test's namespaces
}

// newTestNode creates a node netns and a Node using it, all removed by t.Cleanup, which also
// checks that nothing leaked: no pod netns, no link beyond lo and the uplinks, no nft table.
func newTestNode(t testing.TB) *testNode { return newTestNodeWith(t, NodeConfig{}) }

// newTestNodeWith is newTestNode with cfg (its NetnsPath and NetnsDir are the test's).
func newTestNodeWith(t testing.TB, cfg NodeConfig) *testNode {
	t.Helper()
	prereq.Root(t)
	rootBefore := rootLinkNames(t)
	dir := nsDir(t)
	ns := newNetns(t, dir, "node")
	cfg.NetnsPath, cfg.NetnsDir = ns, filepath.Join(dir, "pods")
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tn := &testNode{Node: n, ns: ns, dir: dir}
	t.Cleanup(func() {
		if t.Failed() {
			return // leave the failure's own message alone; namespaces still get removed
		}
		if pods, _ := os.ReadDir(filepath.Join(dir, "pods")); len(pods) > 0 {
			t.Errorf("pod namespaces left behind: %v", pods)
		}
		if links := linkNames(t, ns); slices.ContainsFunc(links, func(s string) bool {
			return s == DefaultBridge || strings.HasPrefix(s, "vmh")
		}) {
			t.Errorf("node links left behind: %v", links)
		}
		if tables := tableNames(t, ns); len(tables) > 0 {
			t.Errorf("node nft tables left behind: %v", tables)
		}
		assertRootUntouched(t, rootBefore)
	})
	return tn
}

// nsDir is a folder for the test's namespace mounts; its namespaces are removed by t.Cleanup
// (registered after TempDir's, so it runs before the folder is deleted).
func nsDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	t.Cleanup(func() {
		for _, sub := range []string{dir, filepath.Join(dir, "pods")} {
			ents, _ := os.ReadDir(sub)
			for _, e := range ents {
				if !e.IsDir() {
					if err := removeNetns(filepath.Join(sub, e.Name())); err != nil {
						t.Error(err)
					}
				}
			}
		}
	})
	return dir
}

// newNetns creates netns dir/name (removed by nsDir's cleanup).
func newNetns(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if _, err := createNetns(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// attachHost builds a "host" netns (client or remote) behind the node: a veth with
// netAddr's .1 on the node side and .2 on the host side, default route via .1. It returns
// the host's netns and address.
func attachHost(t testing.TB, tn *testNode, name string, net netip.Prefix) (string, netip.Addr) {
	t.Helper()
	ns, a, _ := attachHost6(t, tn, name, net, netip.Prefix{})
	return ns, a
}

// attachHost6 is attachHost with an IPv6 network as well (::1 node side, ::2 host side).
func attachHost6(t testing.TB, tn *testNode, name string, net, net6 netip.Prefix) (string, netip.Addr, netip.Addr) {
	t.Helper()
	hostNS := newNetns(t, tn.dir, name)
	nodeAddr := netip.PrefixFrom(net.Addr().Next(), net.Bits())
	hostAddr := netip.PrefixFrom(nodeAddr.Addr().Next(), net.Bits())
	h, done, err := nsHandle(tn.ns)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	peerNS, closeNS := openNS(t, hostNS)
	defer closeNS()
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up-" + name}, PeerName: "eth0", PeerNamespace: netlink.NsFd(peerNS)}
	must(t, h.LinkAdd(v))
	must(t, h.AddrAdd(v, &netlink.Addr{IPNet: prefixNet(nodeAddr)}))
	must(t, h.LinkSetUp(v))
	hh, hdone, err := nsHandle(hostNS)
	if err != nil {
		t.Fatal(err)
	}
	defer hdone()
	l, err := hh.LinkByName("eth0")
	must(t, err)
	must(t, hh.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(hostAddr)}))
	must(t, hh.LinkSetUp(l))
	must(t, hh.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: nodeAddr.Addr().AsSlice()}))
	var hostAddr6 netip.Prefix
	if net6.IsValid() {
		nodeAddr6 := netip.PrefixFrom(net6.Addr().Next(), net6.Bits())
		hostAddr6 = netip.PrefixFrom(nodeAddr6.Addr().Next(), net6.Bits())
		must(t, h.AddrAdd(v, &netlink.Addr{IPNet: prefixNet(nodeAddr6), Flags: unix.IFA_F_NODAD}))
		must(t, hh.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(hostAddr6), Flags: unix.IFA_F_NODAD}))
		must(t, hh.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: nodeAddr6.Addr().AsSlice(), Dst: prefixNet(netip.MustParsePrefix("::/0"))}))
	}
	t.Cleanup(func() {
		if h, done, err := nsHandle(tn.ns); err == nil {
			if l, err := h.LinkByName("up-" + name); err == nil {
				must(t, h.LinkDel(l))
			}
			done()
		}
	})
	return hostNS, hostAddr.Addr(), hostAddr6.Addr()
}

func openNS(t testing.TB, path string) (int, func()) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(f.Fd()), func() { f.Close() }
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// linkNames lists the links of a namespace, sorted.
func linkNames(t testing.TB, ns string) []string {
	t.Helper()
	h, done, err := nsHandle(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	sort.Strings(names)
	return names
}

func tableNames(t testing.TB, ns string) []string {
	t.Helper()
	ts, err := listTables(ns)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// rootLinkNames lists the host namespace's links: taps created on the wrong thread would
// land there.
func rootLinkNames(t testing.TB) []string { return linkNames(t, "") }

// assertRootUntouched fails if a link with one of vmlet's names appeared in the host's
// namespace (other tests on the machine may add links of their own: only ours count).
func assertRootUntouched(t testing.TB, before []string) {
	t.Helper()
	for _, n := range rootLinkNames(t) {
		ours := n == DefaultBridge || strings.HasPrefix(n, "vmh") || strings.HasPrefix(n, "k6t-") || strings.HasPrefix(n, "tap")
		if ours && !slices.Contains(before, n) {
			t.Errorf("link %s appeared in the host namespace", n)
		}
	}
}

// listenIn listens on TCP addr inside netns ns (the socket belongs to ns for its lifetime).
func listenIn(t testing.TB, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	err := doInNetns(ns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// dialIn connects to TCP addr from inside netns ns.
func dialIn(ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := doInNetns(ns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	})
	return c, err
}

// exchange dials addr from ns, reads the greeting the peer sends and returns it.
func exchange(ns, addr string) (string, error) {
	c, err := dialIn(ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// serveGreeting answers every connection on ln with "hello <peer ip>\n" and closes it, so the
// dialer learns which source address the server saw.
func serveGreeting(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			fmt.Fprintf(c, "hello %s\n", host)
			c.Close()
		}
	}()
}

// isRefused reports a TCP RST answer: the packet reached a namespace without a listener.
func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
