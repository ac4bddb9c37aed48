package realcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
)

// residue checks, one kind at a time, what is left of a cluster at l: processes, mounts,
// iptables/ip6tables/nft chains, cgroups in every hierarchy, the bridge and its veths, the
// layout's folders (kubelet root, containerd root and state, netns, CNI IPAM), kubelet's
// /var/log/containers links and CNI's cached results. Each entry names the kind.
func residue(l layout) []string {
	var out []string
	add := func(kind, what string) { out = append(out, kind+": "+what) }
	for _, p := range clusterPIDs(l) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		add("process", fmt.Sprintf("%d %s", p, strings.ReplaceAll(string(b), "\x00", " ")))
	}
	for _, m := range clusterMounts(l) {
		add("mount", m)
	}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, t := range iptablesTables {
			cs, err := ourChains(cmd, t)
			if err != nil {
				add("iptables", err.Error())
			}
			for _, c := range cs {
				add(cmd+" chain", t+"/"+c)
			}
		}
	}
	if b, err := exec.Command("nft", "list", "ruleset").Output(); err == nil {
		for _, ln := range strings.Split(string(b), "\n") {
			fs := strings.Fields(ln)
			if len(fs) >= 2 && fs[0] == "chain" && hasChainPrefix(fs[1]) {
				add("nft chain", fs[1])
			}
		}
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h.path, CgroupRoot)); err == nil {
			add("cgroup", filepath.Join(h.path, CgroupRoot))
		}
	}
	if _, err := netlink.LinkByName(BridgeName); err == nil {
		add("link", BridgeName)
	}
	links, _ := netlink.LinkList()
	for _, ln := range links {
		if strings.HasPrefix(ln.Attrs().Name, "veth") && ln.Attrs().MasterIndex != 0 {
			if m, err := netlink.LinkByIndex(ln.Attrs().MasterIndex); err == nil && m.Attrs().Name == BridgeName {
				add("link", ln.Attrs().Name)
			}
		}
	}
	for _, d := range []string{l.Root, l.Run} {
		if _, err := os.Stat(d); err == nil {
			add("folder", d)
		}
	}
	if ents, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range ents {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, l.Root+"/") {
				add("log link", p)
			}
		}
	}
	for _, pat := range cniCacheGlobs {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			add("cni cache", p)
		}
	}
	return append(out, globalResidue()...)
}
