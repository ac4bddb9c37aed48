package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/nodeagent"
	"github.com/vmlet/vmlet/storage"
)

// nodeFlags are the storage and network flags `vmlet local` and `vmlet agent` share.
type nodeFlags struct {
	storage          nodeagent.StorageConfig
	images, claims   []string
	subnet, subnet6  string
	netns, netnsDir  string
	resolvConf       string
	tcgCacheMiB      int
	withNodeNetworks bool
	uid, gid         int
	cpuWeights       bool
	selinuxRelabel   string
	// user is the launchers' user, set by parse.
	user process.User
}

func addNodeFlags(f *pflag.FlagSet, withNetwork bool) *nodeFlags {
	n := &nodeFlags{withNodeNetworks: withNetwork}
	f.StringArrayVar(&n.images, "image", nil, "REF=SOURCE: pull image REF from SOURCE instead, e.g. an OCI layout oci:/dir:tag (repeatable)")
	f.StringVar(&n.storage.ImageCacheDir, "image-cache", "", "OCI image cache shared by all VMIs (default <state-dir>/images)")
	f.StringVar(&n.storage.VolumeRoot, "volume-root", "", "per-VMI storage folders: overlays, empty disks, cloud-init ISOs (default <state-dir>/volumes)")
	f.StringVar(&n.storage.HostDiskRoot, "host-disk-root", "", "hostDisk volumes must be beneath this folder (empty: hostDisks are refused)")
	f.StringArrayVar(&n.claims, "claim", nil, "NAME=PATH: persistentVolumeClaim/dataVolume NAME (or NAMESPACE/NAME) is PATH, a folder with disk.img or a block device (repeatable)")
	f.IntVar(&n.tcgCacheMiB, "tcg-cache-mib", launcherpod.DefaultTCGCacheMiB, "TCG translation cache per VM (MiB) when KVM is not usable; 0: QEMU's default (1 GiB, of which a Debian boot keeps ≈600 MiB resident)")
	f.DurationVar(&n.storage.PullBackOff, "image-pull-backoff", backoff.DefaultInitial, "wait after a VMI's first failed image pull, doubled after each further failure (as the kubelet)")
	f.DurationVar(&n.storage.PullBackOffMax, "image-pull-backoff-max", backoff.DefaultMax, "longest wait between a VMI's tries to pull an image")
	f.IntVar(&n.uid, "launcher-uid", process.DefaultUID, "uid launchers and QEMU run as, without capabilities; each VMI's files are handed to it (0: root, with every capability)")
	f.IntVar(&n.gid, "launcher-gid", process.DefaultGID, "gid launchers and QEMU run as")
	f.BoolVar(&n.cpuWeights, "cpu-weights", true, "process runtime: each VM's cgroup gets the kubelet's CPU weight for its request, its vCPU threads the lowest, vmlet (and local mode's control plane) the highest")
	f.StringVar(&n.selinuxRelabel, "selinux-relabel", string(controllers.RelabelAuto), "label each VMI's files for its launcher: auto (where SELinux is enabled), always (also where it is disabled: the xattrs are written, no process label is set), never")
	f.StringVar(&n.storage.SELinuxLauncherType, "selinux-launcher-type", "", "SELinux process type of launchers this agent starts itself (process runtime; empty: container_t; KubeVirt's policy module: virt_launcher.process)")
	if withNetwork {
		f.StringVar(&n.subnet, "node-subnet", network.DefaultNodeSubnet.String(), "pod subnet of the node network (vmlet is this machine's CNI: bridge vmlet0, NAT)")
		f.StringVar(&n.subnet6, "node-subnet6", "", "IPv6 pod subnet, e.g. "+network.DefaultNodeSubnet6.String()+" (empty: IPv4 only)")
		f.StringVar(&n.netns, "node-netns", "", "network namespace for the node bridge (empty: the host's); guests reach only what it routes to")
		f.StringVar(&n.netnsDir, "pod-netns-dir", "", "where the launchers' network namespaces are bind-mounted (empty: /run/netns)")
		f.StringVar(&n.resolvConf, "resolv-conf", "", "resolv.conf whose nameservers DHCP offers guests (empty: /etc/resolv.conf)")
	}
	return n
}

// parse checks the values and returns the storage and network configuration.
func (n *nodeFlags) parse() (nodeagent.StorageConfig, nodeagent.NetworkConfig, error) {
	sc := n.storage
	sc.ImageSources = map[string]string{}
	sc.Claims = map[string]storage.Claim{}
	if sc.PullBackOff <= 0 || sc.PullBackOffMax < sc.PullBackOff {
		return sc, nodeagent.NetworkConfig{}, fmt.Errorf("--image-pull-backoff %s, --image-pull-backoff-max %s: %w: want 0 < backoff <= max",
			sc.PullBackOff, sc.PullBackOffMax, nodeagent.ErrBadFlag)
	}
	u, err := nodeagent.LauncherUser(n.uid, n.gid)
	if err != nil {
		return sc, nodeagent.NetworkConfig{}, fmt.Errorf("--launcher-uid/--launcher-gid: %w", err)
	}
	n.user, sc.Owner = u, nodeagent.StorageOwner(u)
	if sc.SELinuxRelabel, err = controllers.ParseRelabel(n.selinuxRelabel); err != nil {
		return sc, nodeagent.NetworkConfig{}, fmt.Errorf("%w: %w", nodeagent.ErrBadFlag, err)
	}
	for _, m := range n.images {
		ref, src, err := nodeagent.ParseImageSource(m)
		if err != nil {
			return sc, nodeagent.NetworkConfig{}, fmt.Errorf("--image: %w", err)
		}
		sc.ImageSources[ref] = src
	}
	for _, m := range n.claims {
		name, c, err := nodeagent.ParseClaim(m)
		if err != nil {
			return sc, nodeagent.NetworkConfig{}, fmt.Errorf("--claim: %w", err)
		}
		sc.Claims[name] = c
	}
	if !n.withNodeNetworks {
		return sc, nodeagent.NetworkConfig{}, nil
	}
	nc, err := nodeagent.ParseNetworkFlags(n.subnet, n.subnet6, n.netns)
	if err != nil {
		return sc, nc, err
	}
	nc.NetnsDir, nc.ResolvConf = n.netnsDir, n.resolvConf
	return sc, nc, nil
}
