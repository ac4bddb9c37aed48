package realcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Node is one of the cluster's nodes: a kubelet with a containerd of its own.
type Node struct {
	// Name is the Node's name (the first node's is Options.NodeName).
	Name string
	// KubeletRootDir is the kubelet's --root-dir.
	KubeletRootDir string
	// ContainerdSocket is its containerd's socket (ctr --address).
	ContainerdSocket string
	// Taint is the NoSchedule taint the node registers with ("" for the first node): only pods
	// that tolerate it land on the other nodes, so a test that wants one node keeps to the first.
	Taint string
	// hostDir is the folder standing in for PrivateHostPaths on this node ("" on the first node,
	// which uses the machine's own).
	hostDir string
	l       layout
	index   int
}

// PrivateHostPaths are the host folders that two nodes on one machine must not share: the
// kubelet's device-plugin folder (it hard-codes it; each kubelet serves its kubelet.sock there)
// and vmlet's node folders (the agent's state, image cache and volumes; the launchers' run
// folders). Every node but the first runs its containerd and kubelet in a mount namespace of its
// own where these are bind mounts of folders below its layout, so its pods' hostPath volumes
// of these paths are the node's own; everything else (/dev, /sys, /proc, the cgroups) is the
// machine's.
var PrivateHostPaths = []string{devicePluginDir, "/var/lib/vmlet", "/run/vmlet"}

// SecondaryNodeTaintKey is the key of the taint every node but the first registers with
// (value: the node's name, effect NoSchedule).
const SecondaryNodeTaintKey = "realcluster.vmlet.dev/secondary"

// HostPath is where path, as the node's pods see it (a hostPath volume), is on this machine.
func (n Node) HostPath(path string) string {
	if n.hostDir == "" {
		return path
	}
	for _, p := range PrivateHostPaths {
		if path == p || strings.HasPrefix(path, p+"/") {
			return filepath.Join(n.hostDir, path)
		}
	}
	if strings.HasPrefix(path, "/var/run/") {
		return n.HostPath("/run/" + strings.TrimPrefix(path, "/var/run/"))
	}
	return path
}

// nodes lays out the cluster's n nodes: the first keeps the cluster's folders (as a one-node
// cluster always had), the others get Root/nodes/<name> and RunDir/nodes/<name>.
func nodes(o Options, l layout) []Node {
	out := make([]Node, o.Nodes)
	for i := range out {
		n := Node{Name: o.NodeName, l: l, index: i}
		if i > 0 {
			n.Name = o.NodeName + "-" + strconv.Itoa(i+1)
			n.l = layout{Root: filepath.Join(l.Root, "nodes", n.Name), Run: filepath.Join(l.Run, "nodes", n.Name)}
			// Short: the launchers' unix sockets below it must stay within 108 bytes.
			n.hostDir = filepath.Join(l.Root, "n"+strconv.Itoa(i+1))
			n.Taint = SecondaryNodeTaintKey + "=" + n.Name + ":NoSchedule"
		}
		n.KubeletRootDir, n.ContainerdSocket = n.l.kubelet(), n.l.ctrSocket()
		out[i] = n
	}
	return out
}

// Ports and addresses of node i: the kubelet's API and health ports step by 10, the pod
// addresses split the pod subnet (the first node keeps its start).
func (n Node) kubeletPort() int   { return kubeletPort + 10*n.index }
func (n Node) kubeletHealth() int { return kubeletHealt + 10*n.index }
func (n Node) cgroupRoot() string {
	if n.index == 0 {
		return CgroupRoot
	}
	return CgroupRoot + "/" + n.Name
}

// podRange is the node's share of PodSubnet: 120 addresses each from podRangeStart.
func (n Node) podRange() (start, end netip.Addr) {
	a := podRangeStart.As4()
	a[3] += byte(120 * n.index)
	start = netip.AddrFrom4(a)
	a[3] += 119
	return start, netip.AddrFrom4(a)
}

// maxNodes is how many nodes fit PodSubnet's ranges.
const maxNodes = 2

// prepareNode makes the node's folders and, on the secondary nodes, the folders standing in
// for PrivateHostPaths and the machine's own, the bind mounts' targets. It returns the
// machine's folders it made (the teardown removes them again): they are made 0755, as the
// kubelet makes a hostPath folder, since a node agent later run on the machine uses them as
// its own (a 0700 /run/vmlet left behind kept every launcher out of it).
func prepareNode(n Node) (made []string, err error) {
	dirs := []string{n.l.Root, n.l.Run, n.l.kubelet(), n.l.podLogs(), n.l.cniConf(), n.l.cniIPAM(), n.l.ctrRoot(), n.l.ctrState()}
	if n.hostDir != "" {
		for _, p := range PrivateHostPaths {
			dirs = append(dirs, filepath.Join(n.hostDir, p))
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return made, err
		}
	}
	if n.hostDir == "" {
		return nil, nil
	}
	for _, p := range PrivateHostPaths {
		m, err := mkdirAllMade(p, 0o755)
		made = append(made, m...)
		if err != nil {
			return made, err
		}
	}
	return made, nil
}

// mkdirAllMade is os.MkdirAll that returns the folders it made, outermost first.
func mkdirAllMade(p string, mode os.FileMode) ([]string, error) {
	var missing []string
	for d := filepath.Clean(p); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		missing = append(missing, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	var made []string
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], mode); err != nil && !errors.Is(err, os.ErrExist) {
			return made, err
		} else if err == nil {
			made = append(made, missing[i])
		}
	}
	return made, nil
}

// startNode starts the node's containerd (on a secondary node: in a new mount namespace with
// PrivateHostPaths bound to its own folders) and waits for its socket.
func (c *Cluster) startNode(ctx context.Context, o Options, n Node) (pid int, err error) {
	if err := os.WriteFile(n.l.ctrConfig(), []byte(containerdConfig(n.l)), 0o600); err != nil {
		return 0, err
	}
	conf, err := cniConflist(n)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(n.l.cniConf(), "10-vmlet-cluster.conflist"), conf, 0o600); err != nil {
		return 0, err
	}
	args := []string{"containerd", "--config", n.l.ctrConfig()}
	if n.hostDir != "" {
		// unshare(1) makes the namespace a slave of the host's (the machine's later mounts show
		// in it, its own never leave it); the shell binds the folders and becomes containerd.
		script := "set -e\n"
		for _, p := range PrivateHostPaths {
			script += fmt.Sprintf("mount --bind %q %q\nmount --make-private %q\n", filepath.Join(n.hostDir, p), p, p)
		}
		script += `exec "$@"` + "\n"
		args = append([]string{"unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script, "sh"}, args...)
	}
	pid, err = c.daemon(n.logName("containerd"), o.Detach, args[0], args[1:]...)
	if err != nil {
		return 0, err
	}
	return pid, waitFor(ctx, time.Minute, n.Name+" containerd socket", func() bool {
		conn, err := net.Dial("unix", n.l.ctrSocket())
		if err == nil {
			_ = conn.Close()
		}
		return err == nil
	})
}

// startKubelet starts the node's kubelet, on a secondary node in its containerd's mount
// namespace (nsenter).
func (c *Cluster) startKubelet(o Options, n Node, ctrPid int) error {
	kc, err := kubeletConfig(n, filepath.Join(c.l.pki(), "kubelet-client", "ca.crt"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(n.l.kubeletConfig(), kc, 0o600); err != nil {
		return err
	}
	args := []string{filepath.Join(c.Bin, "kubelet"),
		"--config=" + n.l.kubeletConfig(),
		"--kubeconfig=" + c.l.userKubeconfig("kubelet-"+n.Name),
		"--root-dir=" + n.l.kubelet(),
		"--cert-dir=" + filepath.Join(n.l.kubelet(), "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + Gateway.String(),
		"--v=1",
	}
	if n.hostDir != "" {
		args = append([]string{"nsenter", "--mount=/proc/" + strconv.Itoa(ctrPid) + "/ns/mnt", "--"}, args...)
	}
	_, err = c.daemon(n.logName("kubelet"), o.Detach, args[0], args[1:]...)
	return err
}

// logName is the name of one of the node's daemon logs ("kubelet" on the first node, as ever).
func (n Node) logName(daemon string) string {
	if n.index == 0 {
		return daemon
	}
	return n.Name + "-" + daemon
}

// PinNodes gives each node's pods a CPU of their own (node i's on CPU i: the first node's
// kubepods group, the others' cgroup roots), as separate hosts would have them, or (pinned
// false) all the machine's CPUs back; pods made meanwhile inherit their group's CPUs. It writes
// the cgroup-v1 cpuset hierarchy, where a group's CPUs stay within its parent's: children go
// first when narrowing, last when widening.
func (c *Cluster) PinNodes(pinned bool) error {
	if pinned && len(c.Nodes) > runtime.NumCPU() {
		return fmt.Errorf("%d nodes, %d CPUs: cannot give each its own", len(c.Nodes), runtime.NumCPU())
	}
	var h *hierarchy
	for _, x := range cgroupHierarchies() {
		if x.cpuset {
			h = &x
		}
	}
	if h == nil {
		return errors.New("no cgroup-v1 cpuset hierarchy")
	}
	for i, n := range c.Nodes {
		root := filepath.Join(h.path, n.cgroupRoot())
		if i == 0 {
			root = filepath.Join(root, "kubepods") // the other nodes' roots lie below the first's
		}
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		if len(dirs) == 0 {
			return fmt.Errorf("node %s: no cpuset group %s", n.Name, root)
		}
		cpus := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
		if pinned {
			cpus = strconv.Itoa(i)
			slices.Reverse(dirs) // deepest first
		}
		for _, d := range dirs {
			if err := os.WriteFile(filepath.Join(d, "cpuset.cpus"), []byte(cpus), 0o644); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("node %s: CPUs %s for %s: %w", n.Name, cpus, d, err)
			}
		}
	}
	return nil
}
