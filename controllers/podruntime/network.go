package podruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/network"
)

// netnsFile is where the agent pins a launcher pod's network namespace, in its run folder: a
// path that names that namespace for as long as the agent uses it, unlike /proc/<pid>/ns/net,
// which a reused PID could point elsewhere.
const netnsFile = "netns"

// Networks gives the node agent each launcher pod's network namespace, which the cluster's CNI
// made: the VMI's bindings are wired inside it. It implements controllers.PodNetworks.
type Networks struct {
	Runtime *Runtime
}

// CreatePod returns pod id's network: the launcher's network namespace, bind-mounted into its
// run folder (idempotent). The launcher must be serving: the agent wires networks only once the
// launcher is ready. Equivalent to: mount --bind /proc/<launcher>/ns/net <run dir>/netns
func (n Networks) CreatePod(id string) (network.PodNetwork, error) {
	path := filepath.Join(n.Runtime.Dir(id), netnsFile)
	pod := network.PodNetwork{ID: id, NetnsPath: path, Interface: "eth0"}
	if isNetns(path) {
		return pod, nil
	}
	pid := n.Runtime.serving(id)
	if pid == 0 {
		return network.PodNetwork{}, fmt.Errorf("pod network of %s: no launcher serving yet", id)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return network.PodNetwork{}, fmt.Errorf("pin pod network of %s: %w", id, err)
	}
	f.Close()
	if err := unix.Mount("/proc/"+strconv.Itoa(pid)+"/ns/net", path, "", unix.MS_BIND, ""); err != nil {
		return network.PodNetwork{}, fmt.Errorf("pin pod network of %s: %w", id, err)
	}
	return pod, nil
}

// DeletePod unpins the pod's network namespace; the CNI removes the network with the pod.
func (n Networks) DeletePod(id string) error { return unpin(n.Runtime.Dir(id)) }

// unpin removes the netns pin in a run folder, if any. Equivalent to: umount -l <dir>/netns
func unpin(dir string) error {
	path := filepath.Join(dir, netnsFile)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unpin pod network: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("unpin pod network: %w", err)
	}
	return nil
}

// isNetns: path is a mounted network namespace (nsfs).
func isNetns(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// ErrNoMultus is returned for secondary pod interfaces: in a cluster they are Multus's to
// make, and the pod runtime does not drive Multus yet, so its nodes offer no secondary networks.
var ErrNoMultus = errors.New("secondary networks need Multus, which the pod runtime does not drive yet")

// AddInterface refuses: see ErrNoMultus.
func (Networks) AddInterface(id, ifname string) (network.PodNetwork, error) {
	return network.PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, ErrNoMultus)
}

// RemoveInterface has nothing to remove.
func (Networks) RemoveInterface(string, string) error { return nil }

// Interfaces lists no additional interfaces.
func (Networks) Interfaces(string) ([]string, error) { return nil, nil }
