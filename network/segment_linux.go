package network

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"

	"github.com/vmlet/vmlet/internal/revert"
)

// Segment is one node's side of an L2 network shared by the nodes of a machine: a bridge in a
// namespace the nodes share, to which it adds secondary interfaces of this node's pods (as
// Node.AddInterface adds them to the node's own bridge). An interface keeps its address on
// every node: the pod of the same id on another node (a migrating VMI's target) gets the
// address the first one has, so the guest keeps it and its MAC across a migration. The
// kernel is the only state (the host veths' aliases name pod, address, interface and node).
// Nodes in one process coordinate through a lock per bridge; agents in separate processes
// must not share one.
type Segment struct {
	n *Node
}

// NewSegment validates cfg and fills in its defaults. It changes nothing on the host.
func NewSegment(cfg SegmentConfig) (*Segment, error) {
	nc, err := cfg.nodeConfig()
	if err != nil {
		return nil, fmt.Errorf("new segment: %w", err)
	}
	return &Segment{n: &Node{cfg: nc, tag: cfg.Node}}, nil
}

// segmentLocks serialises the nodes of a process on one segment bridge (key: namespace and
// bridge): address choice, and the bridge made by the first interface and removed with the
// last.
var segmentLocks sync.Map

func (s *Segment) lock() func() {
	m, _ := segmentLocks.LoadOrStore(s.n.cfg.NetnsPath+"\x00"+s.n.cfg.Bridge, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// AddInterface gives pod id of this node (its netns made by the node's CreatePod) an interface
// ifname on the segment: a veth whose host end is a port of the segment's bridge and whose pod
// end has the address the pod's interface has on another node, or else the next free one, and
// no routes. Idempotent; what a failing call created is removed again.
//
// Equivalent to: `ip -n SEGMENT link add vmhXXXX master vmlet-shared type veth peer IFNAME
// netns vmlet-ID; ip -n vmlet-ID addr add ADDR dev IFNAME; ip -n vmlet-ID link set IFNAME up`
// (and the bridge on first use).
func (s *Segment) AddInterface(id, ifname string) (_ PodNetwork, err error) {
	if err := checkInterface(id, ifname); err != nil {
		return PodNetwork{}, err
	}
	defer s.lock()()
	cfg := s.n.cfg
	if !isNetnsMount(filepath.Join(cfg.NetnsDir, "vmlet-"+id)) {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: the pod does not exist", ifname, id)
	}
	h, done, err := nsHandle(cfg.NetnsPath)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	defer done()
	r := revert.New()
	defer r.FailErr(&err)
	br, created, err := s.ensureBridge(h)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	if created {
		r.AddErr(func() error { return s.removeBridge(h) })
	}
	ports, err := bridgePorts(h, br)
	if err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	var used []netip.Addr
	var mine, other netip.Addr
	for _, l := range ports {
		v, ok := parsePodAlias(l.Attrs().Alias)
		if !ok || l.Attrs().Name != v.hostName() {
			continue
		}
		used = append(used, v.addr.Addr())
		if v.id == id && v.ifname == ifname {
			if v.node == s.n.tag {
				mine = v.addr.Addr()
			} else {
				other = v.addr.Addr()
			}
		}
	}
	addr := mine
	switch {
	case addr.IsValid():
	case other.IsValid():
		addr = other // the VMI's pod on another node: the guest keeps its address
	default:
		if addr, err = freeAddr(cfg, used); err != nil {
			return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
		}
	}
	p := s.n.secondaryPlan(id, ifname, addr)
	if err := s.n.ensureVeth(h, br, p, mine.IsValid(), r); err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	if err := configurePodSide(p); err != nil {
		return PodNetwork{}, fmt.Errorf("add interface %s to pod %s: %w", ifname, id, err)
	}
	r.Success()
	return p, nil
}

// RemoveInterface removes this node's pod id's interface ifname from the segment (idempotent);
// the same VMI's pod on another node keeps its own. The bridge goes with its last port.
//
// Equivalent to: `ip -n SEGMENT link del vmhXXXX`.
func (s *Segment) RemoveInterface(id, ifname string) error {
	defer s.lock()()
	h, done, err := nsHandle(s.n.cfg.NetnsPath)
	if err != nil {
		return fmt.Errorf("remove interface %s of pod %s: %w", ifname, id, err)
	}
	defer done()
	if err := deleteSecondaries(h, id, ifname, s.n.tag); err != nil {
		return fmt.Errorf("remove interface %s of pod %s: %w", ifname, id, err)
	}
	br, err := h.LinkByName(s.n.cfg.Bridge)
	if err != nil {
		return nil // no bridge: nothing left
	}
	ports, err := bridgePorts(h, br)
	if err != nil {
		return fmt.Errorf("remove interface %s of pod %s: %w", ifname, id, err)
	}
	if len(ports) == 0 {
		return s.removeBridge(h)
	}
	return nil
}

// Interfaces lists the interfaces this node's pod id has on the segment, sorted.
func (s *Segment) Interfaces(id string) ([]string, error) {
	defer s.lock()()
	h, done, err := nsHandle(s.n.cfg.NetnsPath)
	if err != nil {
		return nil, fmt.Errorf("list interfaces of pod %s: %w", id, err)
	}
	defer done()
	return s.n.interfaceNames(h, id)
}

// ensureBridge creates the segment's bridge, or checks the existing one, and sets it up. The
// bridge has no address: a segment routes nothing. It reports whether it created it.
//
// Equivalent to: `ip -n SEGMENT link add vmlet-shared type bridge; ip -n SEGMENT link set
// vmlet-shared up`.
func (s *Segment) ensureBridge(h *netlink.Handle) (netlink.Link, bool, error) {
	name := s.n.cfg.Bridge
	l, err := h.LinkByName(name)
	switch {
	case err == nil && l.Type() != "bridge":
		return nil, false, fmt.Errorf("ensure bridge %s: %w: it is a %s", name, ErrNameCollision, l.Type())
	case err == nil:
		return l, false, h.LinkSetUp(l)
	case !isLinkNotFound(err):
		return nil, false, fmt.Errorf("ensure bridge %s: %w", name, err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: s.n.cfg.MTU, HardwareAddr: GenerateMAC("vmlet-segment", name)}}
	if err := h.LinkAdd(br); err != nil {
		return nil, false, fmt.Errorf("create bridge %s: %w", name, err)
	}
	if l, err = h.LinkByName(name); err == nil {
		err = h.LinkSetUp(l)
	}
	if err == nil {
		// Interfaces whose bridge was deleted under them (not by vmlet: it goes with its last
		// port) are its ports again, so they are found, not taken for another owner's names.
		err = reattachPorts(h, l)
	}
	if err != nil {
		return nil, false, fmt.Errorf("create bridge %s: %w; %w", name, err, s.removeBridge(h))
	}
	return l, true, nil
}

// removeBridge deletes the segment's bridge (a missing one is fine).
func (s *Segment) removeBridge(h *netlink.Handle) error {
	l, err := h.LinkByName(s.n.cfg.Bridge)
	if err != nil {
		return nil
	}
	if err := h.LinkDel(l); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("delete bridge %s: %w", s.n.cfg.Bridge, err)
	}
	return nil
}
