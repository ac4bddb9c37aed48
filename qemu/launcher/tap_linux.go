package launcher

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/osthread"
)

// tapRef is how a NIC's tap was named on the API: the launcher reopens it from these (stats
// read the tap's counters in its namespace too).
type tapRef struct {
	Name   string
	NetNS  string // "" = the launcher's own network namespace
	Queues int
}

// openTap opens queues file descriptors of the existing tap device ref.Name in the network
// namespace ref.NetNS (TUNSETIFF with IFF_TAP|IFF_NO_PI|IFF_VNET_HDR, plus IFF_MULTI_QUEUE
// for more than one queue, or for one queue of a tap made multiqueue: package network makes
// every tap so). The caller owns the files.
//
// Needs: read-write access to /dev/net/tun, and either CAP_NET_ADMIN or a tap whose owner or
// group is the launcher's; entering another namespace needs CAP_SYS_ADMIN. The namespace is
// entered on a thread Go discards afterwards (osthread.Discarded), so no other goroutine can
// run in that namespace.
//
// Equivalent to what `ip tuntap add ... mode tap` sets up, done from the attaching side.
func openTap(ref tapRef) ([]*os.File, error) {
	queues := max(ref.Queues, 1)
	var files []*os.File
	// The thread may be left in another netns: a discarded one.
	err := osthread.Discarded(func() (err error) {
		files, err = openTapHere(ref, queues)
		return err
	})
	return files, err
}

func openTapHere(ref tapRef, queues int) ([]*os.File, error) {
	if ref.NetNS != "" {
		if err := enterNetNS(ref.NetNS); err != nil {
			return nil, err
		}
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if queues > 1 {
		flags |= unix.IFF_MULTI_QUEUE
	}
	// TUNSETIFF creates a missing device: make sure the tap exists (the agent made it).
	if err := linkExists(ref.Name); err != nil {
		return nil, err
	}
	var files []*os.File
	for q := range queues {
		f, err := attachTap(ref.Name, flags)
		if q == 0 && queues == 1 && errors.Is(err, unix.EINVAL) {
			// The tap is multiqueue: the kernel refuses a single-queue attach to it.
			flags |= unix.IFF_MULTI_QUEUE
			f, err = attachTap(ref.Name, flags)
		}
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("open tap %s queue %d: %w", ref.Name, q, err)
		}
		files = append(files, f)
	}
	return files, nil
}

// linkExists checks that the network interface name exists in the calling thread's
// namespace (SIOCGIFINDEX).
func linkExists(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("look up link %s: %w", name, err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("look up link %q: %w", name, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("look up link %s: %w", name, ErrTapNotFound)
		}
		return fmt.Errorf("look up link %s: %w", name, err)
	}
	return nil
}

// enterNetNS switches the calling (locked) thread into the namespace at path.
func enterNetNS(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter netns %s: %w", path, err)
	}
	return nil
}

// attachTap opens /dev/net/tun and attaches it to the tap name.
func attachTap(name string, flags uint16) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tap name %q: %w", name, err)
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attach: %w (the tap is in use; multiqueue taps need queues > 1)", err)
		}
		return nil, fmt.Errorf("attach: %w", err)
	}
	return os.NewFile(uintptr(fd), "tap:"+name), nil
}

// tapFiles returns ref's queue files: the ones the agent handed over (HandOverTap) if it did,
// else opened by the launcher itself (openTap: root only). The caller owns them.
func (l *Launcher) tapFiles(ref tapRef) ([]*os.File, error) {
	if files, ok := l.taps.take(ref.Name, max(ref.Queues, 1)); ok {
		return files, nil
	}
	return openTap(ref)
}

// tapCounters reads ref's counters from the /proc/net/dev file the agent handed over with the
// tap, else from /proc/thread-self/net/dev inside the tap's namespace (root only).
func (l *Launcher) tapCounters(ref tapRef) (netDev, error) {
	if c, ok, err := l.taps.netDev(ref.Name); ok {
		return c, err
	}
	return tapCounters(ref)
}

// tapCounters reads the tap's counters from /proc/thread-self/net/dev inside its namespace.
func tapCounters(ref tapRef) (netDev, error) {
	var c netDev
	err := osthread.Discarded(func() error { // see openTap
		if ref.NetNS != "" {
			if err := enterNetNS(ref.NetNS); err != nil {
				return err
			}
		}
		b, err := os.ReadFile("/proc/thread-self/net/dev")
		if err != nil {
			return fmt.Errorf("read net counters: %w", err)
		}
		c, err = parseNetDev(b, ref.Name)
		return err
	})
	return c, err
}
