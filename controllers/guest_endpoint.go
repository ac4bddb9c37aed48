package controllers

import (
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vmlet/vmlet/network"
)

// ErrNoGuestEndpoint is returned when the VMI has no wired network in this agent (none declared, not attached
// yet, or no IPv4 address planned for the guest).
var ErrNoGuestEndpoint = errors.New("no guest network endpoint")

// GuestEndpoint is where this node reaches the VMI's guest directly, whatever ports its
// interfaces declare: the pod's network namespace and the IPv4 address the first masquerade
// interface's DHCP hands the guest (10.0.2.2). Dial it with network.DialTCP(ctx, netns,
// addr:port) — port-forward does. A bridge binding gives the pod's address to the guest and
// leaves the pod's namespace no route to it: ErrNoGuestEndpoint.
func (n *NodeNetwork) GuestEndpoint(uid types.UID) (netns string, addr netip.Addr, err error) {
	a := n.attachment(uid)
	if a == nil {
		return "", netip.Addr{}, fmt.Errorf("guest endpoint of %s: %w", uid, ErrNoGuestEndpoint)
	}
	for _, ip := range a.Plan().Interfaces {
		if p := ip.DHCP.ClientAddr; ip.Binding == network.BindingMasquerade && p.IsValid() {
			return a.netns, p.Addr(), nil
		}
	}
	return "", netip.Addr{}, fmt.Errorf("%w: port-forward reaches the guest through a masquerade interface, and vmi %s has none (a bridge binding gives the guest the pod's address, leaving the pod no route to it)", ErrNoGuestEndpoint, uid)
}
