package network

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tapFlags are the flags of every vmlet tap: Ethernet frames, no packet info, one queue per
// open file (multiqueue, also with one queue) and a virtio-net header (what QEMU's virtio-net
// expects for offloads).
const tapFlags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_MULTI_QUEUE | unix.IFF_VNET_HDR

// createTap creates a persistent multiqueue vnet_hdr tap in the namespace at nsPath and
// closes the queue file the creation opened. Taps are created by an ioctl on /dev/net/tun,
// which puts them in the namespace of the calling thread, so this runs on a thread switched
// into nsPath (doInNetns).
//
// Equivalent to: `ip -n NS tuntap add NAME mode tap multi_queue vnet_hdr`.
func createTap(nsPath, name string) error {
	err := doInNetns(nsPath, func() error {
		link := &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: name},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_MULTI_QUEUE_DEFAULTS | netlink.TUNTAP_VNET_HDR,
		}
		err := netlink.LinkAdd(link)
		for _, f := range link.Fds { // Queues 0 closes them already; never leak one
			f.Close()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create tap %s: %w", name, err)
	}
	return nil
}

// OpenTap opens queues queue files of the existing tap name in the network namespace at
// netnsPath (empty: the process's own), for QEMU (qemu.NIC.TapFDs, passed with getfd over
// SCM_RIGHTS). Pass queues = the NIC's queue pairs (vCPUs with multiqueue). The caller owns
// the files and closes them once QEMU has them. The tap must have been created by vmlet
// (multiqueue, vnet_hdr); a missing link is an error, never a new tap.
//
// Equivalent to QEMU opening /dev/net/tun with TUNSETIFF IFF_TAP|IFF_NO_PI|IFF_MULTI_QUEUE|
// IFF_VNET_HDR once per queue.
func OpenTap(netnsPath, name string, queues int) ([]*os.File, error) {
	if queues < 1 || queues > MaxQueues {
		return nil, fmt.Errorf("open tap %s: %w: %d queues, want 1..%d", name, ErrInvalidSpec, queues, MaxQueues)
	}
	h, done, err := nsHandle(netnsPath)
	if err != nil {
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	l, err := h.LinkByName(name)
	done()
	if err != nil {
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	if l.Type() != "tuntap" {
		return nil, fmt.Errorf("open tap %s: %w: type %s", name, ErrNotTap, l.Type())
	}
	var files []*os.File
	err = doInNetns(netnsPath, func() error {
		for q := 0; q < queues; q++ {
			f, err := openTapQueue(name)
			if err != nil {
				return fmt.Errorf("queue %d: %w", q, err)
			}
			files = append(files, f)
		}
		return nil
	})
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("open tap %s: %w", name, err)
	}
	return files, nil
}

// openTapQueue attaches one queue file to tap name in the calling thread's namespace.
func openTapQueue(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(tapFlags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach queue (TUNSETIFF): %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// VhostNetAvailable reports whether /dev/vhost-net exists: only then can QEMU use vhost for
// the taps (the CI machines have none, so vmlet runs vhost=off there).
func VhostNetAvailable() bool {
	st, err := os.Stat("/dev/vhost-net")
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// OpenNetDev opens /proc/thread-self/net/dev inside the network namespace at netnsPath (empty:
// the process's own). The file keeps showing that namespace's interface counters to whoever
// reads it, so a launcher that may not enter the namespace reads its tap's counters from it.
//
// Equivalent to: ip netns exec NS cat /proc/net/dev (once per read).
func OpenNetDev(netnsPath string) (*os.File, error) {
	var f *os.File
	err := doInNetns(netnsPath, func() error {
		var err error
		f, err = os.Open("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open net counters: %w", err)
	}
	return f, nil
}
