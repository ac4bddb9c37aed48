package network

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsfsMagic is the filesystem type of a bind-mounted namespace file (NSFS_MAGIC).
const nsfsMagic = 0x6e736673

// doInNetns runs fn on a fresh OS thread switched into the network namespace at path (empty:
// the process's own). The thread stays locked and is never switched back: when fn returns the
// goroutine exits and Go discards the thread, so no other goroutine ever runs in that
// namespace. Needed where the kernel uses the calling thread's namespace: opening
// /dev/net/tun, /proc/sys/net, and creating sockets.
func doInNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if path != "" {
			ns, err := netns.GetFromPath(path)
			if err != nil {
				errc <- fmt.Errorf("open netns %s: %w", path, err)
				return
			}
			err = netns.Set(ns)
			ns.Close()
			if err != nil {
				errc <- fmt.Errorf("enter netns %s: %w", path, err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
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
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread now lives in the new namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare netns: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind-mount netns: %w", err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
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
