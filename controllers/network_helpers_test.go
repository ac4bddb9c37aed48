package controllers_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/network"
)

// The agents' pod network lives in a network namespace this package creates (traffic rule:
// test packets go only to loopback or to namespaces the test made; nothing touches the host's
// namespace):
//
//	client ns (203.0.113.2) ──veth── node ns (203.0.113.1) ── bridge vmlet0 198.19.118.1/24
//	  2001:db8:c::2                        2001:db8:c::1          (fd76:6d6c:6574:1::1/64 when
//	                                                               an agent runs dual-stack)
//	                                                           └── pods: netns vmlet-<uid>, eth0 198.19.118.N
//
// The node ns has no route anywhere else, so guest traffic cannot leave it.
var testNet struct {
	dir    string // namespace mounts: node, client-*, pods/
	node   string // the node's netns
	cfg    network.NodeConfig
	resolv string // the pods' resolv.conf: empty, guests get no DNS server
}

// setupNetwork creates the node netns (root only; without root the tests that need it stop at
// prereq.Root). The returned function removes every namespace left.
func setupNetwork(tmp string) (func() error, error) {
	if os.Geteuid() != 0 {
		return func() error { return nil }, nil
	}
	testNet.dir = filepath.Join(tmp, "netns")
	if err := os.MkdirAll(filepath.Join(testNet.dir, "pods"), 0o755); err != nil {
		return nil, err
	}
	testNet.node = filepath.Join(testNet.dir, "node")
	if err := createNetns(testNet.node); err != nil {
		return nil, err
	}
	testNet.cfg = network.NodeConfig{NetnsPath: testNet.node, NetnsDir: filepath.Join(testNet.dir, "pods")}
	testNet.resolv = filepath.Join(tmp, "resolv.conf")
	if err := os.WriteFile(testNet.resolv, nil, 0o644); err != nil {
		return nil, err
	}
	return removeAllNetns, nil
}

// removeAllNetns removes the namespaces a failed test left, then the node's.
func removeAllNetns() error {
	var errs []error
	for _, sub := range []string{filepath.Join(testNet.dir, "pods"), testNet.dir} {
		ents, _ := os.ReadDir(sub)
		for _, e := range ents {
			if !e.IsDir() {
				errs = append(errs, removeNetns(filepath.Join(sub, e.Name())))
			}
		}
	}
	return errors.Join(errs...)
}

// agentNetwork is a fresh agent process's network side on the test node (each agent gets its
// own network.Node and attachments, as a restarted agent would); a valid subnet6 makes its pod
// network dual-stack.
func agentNetwork(subnet6 netip.Prefix) (*controllers.NodeNetwork, error) {
	if testNet.node == "" {
		return nil, errors.New("no test node network (not root)")
	}
	cfg := testNet.cfg
	cfg.Subnet6 = subnet6
	n, err := network.NewNode(cfg)
	if err != nil {
		return nil, err
	}
	return &controllers.NodeNetwork{Pods: n, ResolvConf: testNet.resolv}, nil
}

// createNetns creates a network namespace bind-mounted at path, with lo up.
// Equivalent to `ip netns add` (at a path of the test's).
func createNetns(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: Go discards the thread, which changed netns
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("mount netns %s: %w", path, err)
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = removeNetns(path)
		return err
	}
	return nil
}

// removeNetns unmounts and removes a namespace created by createNetns.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
