package dhcp

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"golang.org/x/sys/unix"
)

// doInNetns runs fn on a fresh OS thread switched into the network namespace at path (empty:
// the caller's), which is never unlocked: Go discards it afterwards, so no other goroutine
// runs in that namespace. Sockets fn creates stay in it.
func doInNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if path != "" {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				errc <- fmt.Errorf("open netns %s: %w", path, err)
				return
			}
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
			if err != nil {
				errc <- fmt.Errorf("enter netns %s: %w", path, err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
