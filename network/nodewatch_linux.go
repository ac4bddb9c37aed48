package network

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RepairBridge makes the node bridge again when pods' veths were left without it (the bridge
// was deleted under running VMs): the bridge with its fixed MAC and gateway addresses, the
// pods' veths as its ports and the node's NAT table. Without such veths it does nothing (no
// pods: no bridge is wanted). It reports whether it made the bridge again.
//
// Equivalent to: `ip link add vmlet0 type bridge ...` and `ip link set vmhXXXX master vmlet0`
// for every pod veth, as CreatePod does for the first pod.
func (n *Node) RepairBridge() (bool, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h, done, err := nsHandle(n.cfg.NetnsPath)
	if err != nil {
		return false, fmt.Errorf("repair bridge: %w", err)
	}
	defer done()
	if _, err := h.LinkByName(n.cfg.Bridge); err == nil || !isLinkNotFound(err) {
		return false, nil // there (a port detached from it is not this repair's business), or unreadable: next time
	}
	links, err := h.LinkList()
	if err != nil {
		return false, fmt.Errorf("repair bridge: list links: %w", err)
	}
	orphans := 0
	for _, l := range links {
		if v, ok := parsePodAlias(l.Attrs().Alias); ok && l.Attrs().Name == v.hostName() && l.Type() == "veth" {
			orphans++
		}
	}
	if orphans == 0 {
		return false, nil
	}
	if _, _, err := n.ensureBridge(h); err != nil {
		return false, fmt.Errorf("repair bridge: %w", err)
	}
	return true, nil
}

// WatchBridge repairs the node bridge (RepairBridge) whenever it goes while pods use it: on the
// kernel's link deletion event in the node's network namespace, and every resync in case an
// event was missed. report is called with what each repair did (an error, or nil once the
// bridge was made again). It returns when ctx ends.
func (n *Node) WatchBridge(ctx context.Context, resync time.Duration, report func(error)) error {
	opts := netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}}
	if n.cfg.NetnsPath != "" {
		ns, err := netns.GetFromPath(n.cfg.NetnsPath)
		if err != nil {
			return fmt.Errorf("watch bridge: open netns %s: %w", n.cfg.NetnsPath, err)
		}
		defer ns.Close()
		opts.Namespace = &ns
	}
	updates := make(chan netlink.LinkUpdate, 64)
	stop := make(chan struct{})
	defer close(stop)
	if err := netlink.LinkSubscribeWithOptions(updates, stop, opts); err != nil {
		return fmt.Errorf("watch bridge: subscribe to links: %w", err)
	}
	tick := time.NewTicker(resync)
	defer tick.Stop()
	repair := func() {
		if made, err := n.RepairBridge(); err != nil || made {
			report(err)
		}
	}
	repair() // deleted while no agent ran
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-updates:
			if !ok { // the subscription ended (its socket failed): resync only
				updates = nil
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK && u.Attrs().Name == n.cfg.Bridge {
				repair()
			}
		case <-tick.C:
			repair()
		}
	}
}
