package realcluster

import (
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Files containerd 1.6, libcni and the kubelet write outside any folder they can be given:
// shim sockets (/run/containerd/s/<sha256(address/namespace/id)>), libcni's result cache, and
// the kubelet's device-plugin folder (pluginapi.DevicePluginPath, whatever --root-dir says).
const (
	shimSocketDir   = "/run/containerd/s"
	hostContainerd  = "/run/containerd/containerd.sock"
	cniResults      = "/var/lib/cni/results"
	devicePluginDir = "/var/lib/kubelet/device-plugins"
)

// DevicePluginDir is where the kubelet serves kubelet.sock and device plugins register: the
// kubelet hard-codes it (it does not follow --root-dir).
const DevicePluginDir = devicePluginDir

// shimIDs are the ids of the cluster's shims and sandboxes: from the shims' command lines,
// containerd's task folders and the CNI results of the cluster's network.
func shimIDs(l layout) []string {
	var ids []string
	for _, p := range clusterPIDs(l) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		args := strings.Split(string(b), "\x00")
		if i := slices.Index(args, "-id"); i >= 0 && i+1 < len(args) && strings.Contains(args[0], "containerd-shim") {
			ids = append(ids, args[i+1])
		}
	}
	if ents, err := os.ReadDir(filepath.Join(l.ctrState(), "io.containerd.runtime.v2.task", "k8s.io")); err == nil {
		for _, e := range ents {
			ids = append(ids, e.Name())
		}
	}
	m, _ := filepath.Glob(filepath.Join(cniResults, "vmlet-cluster-*-eth0"))
	for _, p := range m {
		ids = append(ids, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "vmlet-cluster-"), "-eth0"))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// removeGlobals removes, for the given ids, the shim sockets and loopback results, every shim
// socket nobody listens on any more, and the kubelet's device-plugin folder.
func removeGlobals(l layout, ids []string) []error {
	var errs []error
	rm := func(p string) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	for _, id := range ids {
		rm(filepath.Join(shimSocketDir, fmt.Sprintf("%x", sha256.Sum256([]byte(filepath.Join(l.ctrSocket(), "k8s.io", id))))))
		rm(filepath.Join(cniResults, "cni-loopback-"+id+"-lo"))
	}
	for _, p := range staleShimSockets() {
		rm(p)
	}
	if _, err := os.Stat(hostContainerd); err != nil {
		// No host containerd: every loopback result is of this cluster's containerd (those of
		// sandboxes killed before a CNI DEL, this run's or a crashed one's).
		m, _ := filepath.Glob(filepath.Join(cniResults, "cni-loopback-*"))
		for _, p := range m {
			rm(p)
		}
	}
	rm(devicePluginDir)
	_ = os.Remove(filepath.Dir(devicePluginDir)) // only when empty
	return errs
}

// staleShimSockets are the sockets in /run/containerd/s that refuse connections.
func staleShimSockets() []string {
	var out []string
	ents, _ := os.ReadDir(shimSocketDir)
	for _, e := range ents {
		p := filepath.Join(shimSocketDir, e.Name())
		conn, err := net.Dial("unix", p)
		if err == nil {
			_ = conn.Close()
			continue
		}
		out = append(out, p)
	}
	return out
}

// globalResidue lists what is left in those folders: stale shim sockets, loopback results when
// no host containerd runs (then every one is the cluster's), and the device-plugin folder.
func globalResidue() []string {
	var out []string
	for _, p := range staleShimSockets() {
		out = append(out, "shim socket: "+p)
	}
	if _, err := os.Stat(hostContainerd); err != nil {
		m, _ := filepath.Glob(filepath.Join(cniResults, "cni-loopback-*"))
		for _, p := range m {
			out = append(out, "cni cache: "+p)
		}
	}
	if _, err := os.Stat(devicePluginDir); err == nil {
		out = append(out, "folder: "+devicePluginDir)
	}
	return out
}
