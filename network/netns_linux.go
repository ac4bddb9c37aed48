package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/osthread"
)

// nsfsMagic is the filesystem type of a bind-mounted namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// doInNetns runs fn on an OS thread switched into the network namespace at path (empty: the
// process's own). The thread is never switched back: Go discards it afterwards
// (osthread.Discarded, never the main thread), so no other goroutine ever runs in that
// namespace. Needed where the kernel uses the calling thread's namespace: opening
// /dev/net/tun, /proc/sys/net, and creating sockets.
func doInNetns(path string, fn func() error) error {
	return osthread.Discarded(func() error {
		if path != "" {
			ns, err := netns.GetFromPath(path)
			if err != nil {
				return fmt.Errorf("open netns %s: %w", path, err)
			}
			err = netns.Set(ns)
			ns.Close()
			if err != nil {
				return fmt.Errorf("enter netns %s: %w", path, err)
			}
		}
		return fn()
	})
}

// nsHandle opens a netlink handle in the namespace at path (empty: the process's own). The
// returned close function releases both.
func nsHandle(path string) (*netlink.Handle, func(), error) {
	if path == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, nil, fmt.Errorf("open netlink: %w", err)
		}
		return h, h.Close, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("open netlink in %s: %w", path, err)
	}
	return h, func() { h.Close(); ns.Close() }, nil
}

// isNetnsMount reports whether path is a bind-mounted namespace file.
func isNetnsMount(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == nsfsMagic
}

// createNetns creates a network namespace bind-mounted at path, with lo up, unless one is
// already mounted there. It reports whether it created one.
//
// Equivalent to: `ip netns add NAME && ip -n NAME link set lo up`.
func createNetns(path string) (bool, error) {
	if isNetnsMount(path) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create netns dir: %w", err)
	}
	// A plain file left by an interrupted create is reused as the mount point.
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o444)
	if err != nil {
		return false, fmt.Errorf("create netns mount point: %w", err)
	}
	f.Close()
	// The thread lives in the new namespace afterwards: a discarded one.
	err = osthread.Discarded(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare netns: %w", err)
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind-mount netns: %w", err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("create netns %s: %w", path, err)
	}
	h, done, err := nsHandle(path)
	if err == nil {
		var lo netlink.Link
		if lo, err = h.LinkByName("lo"); err == nil {
			err = h.LinkSetUp(lo)
		}
		done()
	}
	if err != nil {
		return false, errors.Join(fmt.Errorf("create netns %s: set lo up: %w", path, err), removeNetns(path))
	}
	return true, nil
}

// removeNetns unmounts and removes a namespace created by createNetns; a missing one is not
// an error. The namespace itself disappears (with its links) once no process, socket or open
// file refers to it any more.
//
// Equivalent to: `ip netns delete NAME`.
func removeNetns(path string) error {
	if isNetnsMount(path) {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("remove netns %s: unmount: %w", path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}
