package realcluster

import (
	"net/netip"
	"path/filepath"
)

// Fixed names of the one cluster this machine runs (see the package doc).
const (
	LockPath      = "/run/vmlet-realcluster.lock"
	DefaultRoot   = "/var/lib/vmlet-cluster"
	DefaultRunDir = "/run/vmlet-cluster"
	// DefaultNodeName is the node's name unless Options.NodeName says otherwise.
	DefaultNodeName = "vmlet-node"
	// PauseImage is containerd's sandbox image (built by hack/images.sh as pause.tar).
	PauseImage = "vmlet.dev/pause:dev"

	BridgeName   = "vmletrc0"
	CgroupRoot   = "/vmlet-cluster"
	svcChain     = "VMLET-RC-SVC"
	kubeletPort  = 10250
	kubeletHealt = 10248
	// kube-proxy's health port (its default), on 127.0.0.1.
	proxyHealth = 10256
)

// Network of the cluster.
var (
	PodSubnet      = netip.MustParsePrefix("172.30.0.0/24")
	Gateway        = netip.MustParseAddr("172.30.0.1")
	ServiceSubnet  = netip.MustParsePrefix("172.30.128.0/24")
	KubernetesSvc  = netip.MustParseAddr("172.30.128.1")
	podRangeStart  = netip.MustParseAddr("172.30.0.10")
	chainPrefixes  = []string{"KUBE-", "CNI-", "VMLET-RC-"}
	iptablesTables = []string{"filter", "nat", "mangle"}
)

// layout is where one cluster keeps its files.
type layout struct {
	Root, Run string
}

func (l layout) etcd() string       { return filepath.Join(l.Root, "etcd") }
func (l layout) apiserver() string  { return filepath.Join(l.Root, "apiserver") }
func (l layout) pki() string        { return filepath.Join(l.Root, "pki") }
func (l layout) logs() string       { return filepath.Join(l.Root, "logs") }
func (l layout) kubelet() string    { return filepath.Join(l.Root, "kubelet") }
func (l layout) podLogs() string    { return filepath.Join(l.Root, "pod-logs") }
func (l layout) cniConf() string    { return filepath.Join(l.Root, "cni", "net.d") }
func (l layout) cniIPAM() string    { return filepath.Join(l.Root, "cni", "ipam") }
func (l layout) ctrRoot() string    { return filepath.Join(l.Root, "containerd") }
func (l layout) ctrState() string   { return filepath.Join(l.Run, "containerd") }
func (l layout) runcRoot() string   { return filepath.Join(l.Run, "runc") }
func (l layout) ctrConfig() string  { return filepath.Join(l.Root, "containerd.toml") }
func (l layout) ctrSocket() string  { return filepath.Join(l.Run, "containerd.sock") }
func (l layout) kubeconfig() string { return filepath.Join(l.Root, "kubeconfig") }
func (l layout) userKubeconfig(n string) string {
	return filepath.Join(l.Root, "kubeconfigs", n+".kubeconfig")
}
func (l layout) kubeletConfig() string { return filepath.Join(l.Root, "kubelet.yaml") }
func (l layout) proxyConfig() string   { return filepath.Join(l.Root, "kube-proxy.yaml") }
func (l layout) detachedMark() string  { return filepath.Join(l.Run, "detached") }
func (l layout) pidFile() string       { return filepath.Join(l.Run, "pids") }

// madeHostPaths lists the machine's folders prepareHost made (bind-mount targets), one a line,
// outermost first; the teardown removes those left empty.
func (l layout) madeHostPaths() string { return filepath.Join(l.Run, "made-host-paths") }

// marks are strings that only this cluster's processes carry in their command lines.
func (l layout) marks() []string { return []string{l.Root + "/", l.Run + "/"} }
