package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// CheckPods fails with ErrSubnetInUse if the node has pod veths (running VMs) whose addresses
// are outside the configured subnet: the node was set up with another subnet, and taking the
// new one would replace the bridge's gateway and NAT under those pods (they would lose their
// way out). It changes nothing: an agent calls it at start and refuses to run.
func (n *Node) CheckPods() error {
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return fmt.Errorf("check node pods: %w", err)
	}
	defer done()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("check node pods: list links: %w", err)
	}
	var ids []string
	subnets := map[netip.Prefix]bool{}
	for _, l := range links {
		v, ok := parsePodAlias(l.Attrs().Alias)
		if !ok || l.Attrs().Name != v.hostName() || n.cfg.Subnet.Contains(v.addr.Addr()) {
			continue
		}
		subnets[v.addr.Masked()] = true
		if !slices.Contains(ids, v.id) {
			ids = append(ids, v.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	var others []string
	for p := range subnets {
		others = append(others, p.String())
	}
	slices.Sort(others)
	slices.Sort(ids)
	return fmt.Errorf("%w: subnet %s, pods %s of %s", ErrSubnetInUse, n.cfg.Subnet, strings.Join(ids, ", "), strings.Join(others, ", "))
}
