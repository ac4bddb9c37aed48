package nodeagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestNetworkClosesWithTheStack: the configured subnet is used, and closing the stack's network
// removes every pod network and, with the last, the node bridge. The node lives in a namespace
// of the test's own.
func TestNetworkClosesWithTheStack(t *testing.T) {
	prereq.Root(t)
	b := make([]byte, 4)
	rand.Read(b)
	suffix := hex.EncodeToString(b)
	nodeNS := "vmlet-lnt-" + suffix
	ip := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	if err := ip("netns", "add", nodeNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ip("netns", "del", nodeNS); err != nil {
			t.Error(err)
		}
	})
	subnet := netip.MustParsePrefix("198.19.200.0/24")
	nn, err := openNetwork(NetworkConfig{Subnet: subnet, NetnsPath: "/run/netns/" + nodeNS})
	if err != nil {
		t.Fatal(err)
	}
	node := nn.Pods.(*network.Node)
	ids := []string{"lnt-a-" + suffix, "lnt-b-" + suffix}
	for _, id := range ids {
		t.Cleanup(func() { _ = node.DeletePod(id) }) // a failed test's leftovers
		p, err := node.CreatePod(id)
		if err != nil {
			t.Fatal(err)
		}
		if !subnet.Contains(p.Addr.Addr()) {
			t.Errorf("pod %s got %s, outside %s", id, p.Addr, subnet)
		}
	}

	// An agent restarted with another --node-subnet while these pods run refuses to start;
	// with theirs it starts.
	other := netip.MustParsePrefix("198.19.201.0/24")
	if _, err := openNetwork(NetworkConfig{Subnet: other, NetnsPath: "/run/netns/" + nodeNS}); !errors.Is(err, network.ErrSubnetInUse) || !strings.Contains(err.Error(), ids[0]) {
		t.Errorf("open with --node-subnet %s while pods of %s run: %v, want ErrSubnetInUse naming the pods", other, subnet, err)
	}
	if _, err := openNetwork(NetworkConfig{Subnet: subnet, NetnsPath: "/run/netns/" + nodeNS}); err != nil {
		t.Errorf("open again with the pods' subnet: %v", err)
	}

	if err := CloseNetwork(nn); err != nil {
		t.Fatal(err)
	}
	if pods, err := node.Pods(); err != nil || len(pods) != 0 {
		t.Errorf("pods after close: %v, %v", pods, err)
	}
	for _, id := range ids {
		if _, err := os.Stat("/run/netns/vmlet-" + id); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod netns of %s left: %v", id, err)
		}
	}
	h, err := netns.GetFromName(nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	if _, err := nh.LinkByName(network.DefaultBridge); err == nil {
		t.Errorf("node bridge %s left after the last pod", network.DefaultBridge)
	}
}

func TestParseNetworkFlags(t *testing.T) {
	c, err := ParseNetworkFlags("", "", "")
	if err != nil || c != (NetworkConfig{}) {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	c, err = ParseNetworkFlags("198.19.200.0/24", "fd76:6d6c:6574:2::/64", "/run/netns/node")
	want := NetworkConfig{Subnet: netip.MustParsePrefix("198.19.200.0/24"), Subnet6: netip.MustParsePrefix("fd76:6d6c:6574:2::/64"), NetnsPath: "/run/netns/node"}
	if err != nil || c != want {
		t.Errorf("set: %+v, %v; want %+v", c, err, want)
	}
	for _, bad := range [][2]string{{"198.19.200.0", ""}, {"", "fd00::"}, {"198.19.200.0/31", ""}, {"fd76::/64", ""}} {
		if _, err := ParseNetworkFlags(bad[0], bad[1], ""); err == nil {
			t.Errorf("ParseNetworkFlags(%q, %q) accepted", bad[0], bad[1])
		}
	}
}
