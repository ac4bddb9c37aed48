package clustere2e_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/test/kubeletsim"
)

// simNode is a cluster node after the first: its own agent, kubeletsim, pod network (a
// namespace and subnet of its own) and pod cgroups, and its own "root filesystem" (hostRoot):
// the launcher pods' hostPath folders, which the controller names the same for every node, are
// under hostRoot here (kubeletsim.Kubelet.HostRoot), and this node's agent is given those
// folders, as every node of a real cluster has its own /var/run/vmlet.
type simNode struct {
	name, hostRoot                       string
	launcherRoot, volumeRoot, imageCache string
	podCgroups, podNetns                 string
	cniNetns                             string // its pod bridge's namespace (ip netns name)
	agentArgs                            []string
	agent                                *proc
	kubelet                              *kubeletsim.Kubelet
}

// addNode adds node i (2, 3, ...) to c and starts its agent; startClusterWith registers its
// kubeletsim with the manager. guest is the test guest's image layout, suffix the cluster's.
func (c *cluster) addNode(t *testing.T, i int, guest, suffix string) *simNode {
	t.Helper()
	// Short: the run folders' sockets are <hostRoot><launcherRoot>/<uid>/..., under the
	// 108-byte limit of a unix socket path.
	root, err := os.MkdirTemp("", fmt.Sprintf("n%d-", i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unmountUnder(t, root)
		_ = os.RemoveAll(root)
	})
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	n := &simNode{name: fmt.Sprintf("%s-%d", nodeName, i), hostRoot: root,
		launcherRoot: filepath.Join(root, c.launcherRoot), volumeRoot: filepath.Join(root, c.volumeRoot),
		imageCache: filepath.Join(root, c.imageCache), podNetns: filepath.Join(root, "pods"),
		podCgroups: fmt.Sprintf("%s-%d", c.podCgroups, i)}
	// Every parent of the hostPath folders is searchable, as on a node (/var, /var/run).
	for _, d := range []string{filepath.Dir(n.launcherRoot), filepath.Dir(n.volumeRoot)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			t.Fatal(err)
		}
		for p := d; p != root; p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o711); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Mkdir(n.podCgroups, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(n.podCgroups) })
	nsName := fmt.Sprintf("vmlet-cl%d-%s", i, suffix)
	if out, err := exec.Command("ip", "netns", "add", nsName).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", nsName).Run() })
	n.cniNetns = nsName
	// 198.19.118.0/24 is the first node's (network.DefaultNodeSubnet); node i takes the i-1st
	// /24 after it.
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(118 + i - 1), 0}), 24)
	cni, err := network.NewNode(network.NodeConfig{NetnsPath: "/run/netns/" + nsName, NetnsDir: n.podNetns, Subnet: subnet})
	if err != nil {
		t.Fatal(err)
	}
	n.kubelet = &kubeletsim.Kubelet{NodeName: n.name, CgroupParent: n.podCgroups, Network: cni, LogDir: c.tmp,
		HostRoot: root, Binaries: map[string]string{launcherpod.Binary: launch}}
	n.agentArgs = []string{vmletBin, "agent", "--runtime", "pod", "--kubeconfig", env.Kubeconfig, "--node-name", n.name,
		"--register-node", "--launcher-root", n.launcherRoot, "--volume-root", n.volumeRoot, "--image-cache", n.imageCache,
		"--state-dir", filepath.Join(root, "state"), "--run-root", filepath.Join(root, "run"), "--image", guestImage + "=" + guest,
		"--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", freeAddr(t),
		"--device-plugins=false", "--migration-address", "127.0.0.1"}
	n.agent = c.run(t, "agent "+n.name, n.agentArgs...)
	c.others = append(c.others, n)
	return n
}

// roots are the folders of the node called name (the first node's when it is none of the
// others): launcher root, volume root, pod cgroups and pod network namespaces.
func (c *cluster) roots(name string) (launcherRoot, volumeRoot, podCgroups, podNetns string) {
	for _, n := range c.others {
		if n.name == name {
			return n.launcherRoot, n.volumeRoot, n.podCgroups, n.podNetns
		}
	}
	return c.launcherRoot, c.volumeRoot, c.podCgroups, c.podNetns
}

// cniNetns is the namespace (ip netns name) of node name's pod bridge: where the node reaches
// its pods' addresses.
func (c *cluster) cniNetnsOf(name string) string {
	for _, n := range c.others {
		if n.name == name {
			return n.cniNetns
		}
	}
	return c.cniNetns
}
