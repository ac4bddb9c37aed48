package network

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/vmlet/vmlet/internal/revert"
)

// AddInterface gives pod id (created by CreatePod) an additional interface ifname, as a
// secondary network attachment (Multus) would in a cluster: one more veth whose host end is a
// port of the node bridge and whose pod end, ifname in the pod's netns, has the next free
// address of the node subnet and no routes (the pod's default route stays on eth0). It is
// idempotent, and what a failing call created is removed again. ifname is typically
// SecondaryInterfaceName(network).
//
// Equivalent to: `ip link add vmhXXXX master vmlet0 type veth peer IFNAME netns vmlet-ID;
// ip -n vmlet-ID addr add ADDR dev IFNAME; ip -n vmlet-ID link set IFNAME up`.
func (n *Node) AddInterface(id, ifname string) (_ PodNetwork, err error) {
	if err := checkInterface(id, ifname); err != nil {
		return PodNetwork{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	defer done()
	r := revert.New()
	defer r.FailErr(&err)
	br, err := h.LinkByName(n.cfg.Bridge)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: no node bridge (create the pod first): %w", ifname, id, err)
	}
	pods, used, err := n.scan(h, br)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	pod, ok := pods[id]
	if !ok || !isNetnsMount(pod.NetnsPath) {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: the pod does not exist", ifname, id)
	}
	veths, err := n.secondaries(h, id)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	var p PodNetwork
	v, exists := veths[ifname]
	if exists {
		p = n.secondaryPlan(id, ifname, v.addr.Addr())
	} else {
		addr, err := freeAddr(n.cfg, used)
		if err != nil {
			return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
		}
		p = n.secondaryPlan(id, ifname, addr)
	}
	if err := n.ensureVeth(h, br, p, exists, r); err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	if err := configurePodSide(p); err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	r.Success()
	return p, nil
}

// RemoveInterface removes pod id's additional interface ifname (idempotent). Deleting the host
// end of the veth deletes its pod end too.
//
// Equivalent to: `ip link del vmhXXXX`.
func (n *Node) RemoveInterface(id, ifname string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return fmt.Errorf("remove interface %s of pod %s: %w", ifname, id, err)
	}
	defer done()
	if err := deleteSecondaries(h, id, ifname, n.tag); err != nil {
		return fmt.Errorf("remove interface %s of pod %s: %w", ifname, id, err)
	}
	return nil
}

// Interfaces lists the additional interfaces (AddInterface) of pod id, sorted.
func (n *Node) Interfaces(id string) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("list interfaces of pod %s: %w", id, err)
	}
	defer done()
	return n.interfaceNames(h, id)
}

// checkInterface checks AddInterface's arguments.
func checkInterface(id, ifname string) error {
	if err := checkPodID(id); err != nil {
		return fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	if !secondaryIfnameRE.MatchString(ifname) || ifname == DefaultPodInterface {
		return fmt.Errorf("add interface %s to pod %s: %w", ifname, id,
			fieldErr("ifname", ifname, ErrInvalidSpec, "want a lowercase interface name of at most 15 characters, not eth0"))
	}
	return nil
}

// secondaryPlan is the plan of pod id's secondary interface ifname with address addr on this
// node's bridge, or on a segment for the node n.tag.
func (n *Node) secondaryPlan(id, ifname string, addr netip.Addr) PodNetwork {
	p := secondaryPlan(n.cfg, id, ifname, addr)
	if n.tag != "" {
		p.HostVeth, p.Node = segmentVethName(id, ifname, n.tag), n.tag
	}
	return p
}

// interfaceNames lists pod id's additional interfaces (secondaries), sorted.
func (n *Node) interfaceNames(h *netlink.Handle, id string) ([]string, error) {
	veths, err := n.secondaries(h, id)
	if err != nil {
		return nil, fmt.Errorf("list interfaces of pod %s: %w", id, err)
	}
	var out []string
	for name := range veths {
		out = append(out, name)
	}
	slices.Sort(out)
	return out, nil
}

// secondaries finds pod id's additional interfaces by their host veths' aliases.
func (n *Node) secondaries(h *netlink.Handle, id string) (map[string]podVeth, error) {
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	out := map[string]podVeth{}
	for _, l := range links {
		if v, ok := parsePodAlias(l.Attrs().Alias); ok && v.id == id && v.ifname != "" && v.node == n.tag && l.Attrs().Name == v.hostName() {
			out[v.ifname] = v
		}
	}
	return out, nil
}

// deleteSecondaries deletes the host veths of pod id's additional interface ifname, or of all
// of them when ifname is empty: those of node's pod on a segment, those on a node's own
// bridge when node is empty.
func deleteSecondaries(h *netlink.Handle, id, ifname, node string) error {
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		v, ok := parsePodAlias(l.Attrs().Alias)
		if !ok || v.id != id || v.ifname == "" || v.node != node || (ifname != "" && v.ifname != ifname) || l.Attrs().Name != v.hostName() {
			continue
		}
		if err := h.LinkDel(l); err != nil && !isLinkNotFound(err) {
			return fmt.Errorf("delete veth %s: %w", l.Attrs().Name, err)
		}
	}
	return nil
}
