package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// waitLinkLocal waits until link index has a link-local address that passed DAD (a DHCPv6
// client sends from it). Equivalent to polling `ip -6 addr show dev IFACE scope link -tentative`.
func waitLinkLocal(ctx context.Context, index int) error {
	return waitAddr(ctx, index, func(a *net.IPNet) bool { return a.IP.IsLinkLocalUnicast() })
}

// addAddr adds (or refreshes) the leased address as a /128 with its lifetimes and waits until
// it passed DAD. Equivalent to `ip -6 addr replace ADDR/128 dev IFACE valid_lft V
// preferred_lft P` and waiting for its tentative flag to clear.
func addAddr(ctx context.Context, index int, l lease) error {
	link, err := netlink.LinkByIndex(index)
	if err != nil {
		return fmt.Errorf("find link %d: %w", index, err)
	}
	a := &netlink.Addr{
		IPNet:       &net.IPNet{IP: l.addr, Mask: net.CIDRMask(128, 128)},
		ValidLft:    seconds(l.valid),
		PreferedLft: seconds(l.preferred),
	}
	if err := netlink.AddrReplace(link, a); err != nil {
		return fmt.Errorf("add address %s: %w", l.addr, err)
	}
	return waitAddr(ctx, index, func(n *net.IPNet) bool { return n.IP.Equal(l.addr) })
}

// seconds is a lifetime for netlink: whole seconds, "forever" for an infinite lease.
func seconds(d time.Duration) int {
	if d <= 0 || d >= 0xffffffff*time.Second {
		return 0 // forever
	}
	return int(d / time.Second)
}

// waitAddr waits, on netlink address events, until link index has an address matching match
// that is no longer tentative.
func waitAddr(ctx context.Context, index int, match func(*net.IPNet) bool) error {
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	errc := make(chan error, 1)
	err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
		ListExisting: true,
		ErrorCallback: func(err error) {
			select {
			case errc <- err:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("subscribe to address events: %w", err)
	}
	for {
		select {
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("wait for address on link %d: subscription ended", index)
			}
			if u.LinkIndex != index || u.LinkAddress.IP.To4() != nil || !match(&u.LinkAddress) {
				continue
			}
			if u.NewAddr && u.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0 {
				return nil
			}
			if u.Flags&unix.IFA_F_DADFAILED != 0 {
				return fmt.Errorf("wait for address %s: duplicate address detection failed", u.LinkAddress.IP)
			}
		case err := <-errc:
			return fmt.Errorf("wait for address on link %d: %w", index, err)
		case <-ctx.Done():
			return fmt.Errorf("wait for address on link %d: %w", index, ctx.Err())
		}
	}
}
