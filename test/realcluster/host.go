package realcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
)

// prepareHost makes the layout's folders (and each node's), the bridge with the gateway address
// (the CNI bridge plugin adopts it; the API server and the kubelets listen on its address) and
// each node's cgroup root in every cgroup hierarchy (the kubelet refuses a missing cgroupRoot).
func prepareHost(l layout, nodes []Node) error {
	for _, d := range []string{l.Root, l.Run, l.etcd(), l.apiserver(), l.pki(), l.logs(), l.kubelet(),
		l.podLogs(), l.cniConf(), l.cniIPAM(), l.ctrRoot(), l.ctrState(), filepath.Dir(l.userKubeconfig("x"))} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(l.Root, 0o755); err != nil {
		return err
	}
	var made []string
	for _, n := range nodes {
		m, err := prepareNode(n)
		made = append(made, m...)
		if werr := os.WriteFile(l.madeHostPaths(), []byte(strings.Join(made, "\n")), 0o600); werr != nil {
			return errors.Join(err, werr)
		}
		if err != nil {
			return err
		}
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("add bridge %s: %w", BridgeName, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: Gateway.AsSlice(), Mask: net.CIDRMask(PodSubnet.Bits(), 32)}}
	if err := netlink.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("address bridge %s: %w", BridgeName, err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return fmt.Errorf("up bridge %s: %w", BridgeName, err)
	}
	for _, h := range cgroupHierarchies() {
		for _, n := range nodes {
			if err := makeCgroup(h, n.cgroupRoot()); err != nil {
				return err
			}
		}
	}
	return nil
}

// makeCgroup makes cgroup dir (and its parents) in hierarchy h; a v1 cpuset group runs
// nothing until cpus and mems are set, so they are copied down from the hierarchy's root.
func makeCgroup(h hierarchy, dir string) error {
	parent := h.path
	for _, part := range strings.Split(strings.Trim(dir, "/"), "/") {
		d := filepath.Join(parent, part)
		parent = d
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("make cgroup %s: %w", d, err)
		}
		if h.cpuset {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h.path, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(d, f), bytes.TrimSpace(b), 0o644); err != nil {
					return fmt.Errorf("write %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}

// serviceDNAT sends the kubernetes Service (KubernetesSvc:443) to the API server, from the host
// (OUTPUT) and from pods (PREROUTING): the one Service a cluster without kube-proxy needs.
func serviceDNAT(apiserver netip.AddrPort) error {
	rules := [][]string{
		{"-t", "nat", "-N", svcChain},
		{"-t", "nat", "-A", svcChain, "-d", KubernetesSvc.String() + "/32", "-p", "tcp", "--dport", "443",
			"-j", "DNAT", "--to-destination", apiserver.String()},
		{"-t", "nat", "-I", "PREROUTING", "-j", svcChain},
		{"-t", "nat", "-I", "OUTPUT", "-j", svcChain},
	}
	for _, r := range rules {
		if out, err := exec.Command("iptables", append([]string{"-w"}, r...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %v: %w: %s", r, err, bytes.TrimSpace(out))
		}
	}
	return nil
}
