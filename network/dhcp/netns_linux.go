package dhcp

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/osthread"
)

// doInNetns runs fn on an OS thread switched into the network namespace at path (empty: the
// caller's), which Go discards afterwards (osthread.Discarded, never the main thread), so no
// other goroutine runs in that namespace. Sockets fn creates stay in it.
func doInNetns(path string, fn func() error) error {
	return osthread.Discarded(func() error {
		if path != "" {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open netns %s: %w", path, err)
			}
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("enter netns %s: %w", path, err)
			}
		}
		return fn()
	})
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
