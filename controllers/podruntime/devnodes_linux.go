package podruntime

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/controllers/process"
)

// errNotBlock says a launcher's device path is not a block device in its container.
var errNotBlock = errors.New("not a block device")

// OwnDeviceNodes hands the block device nodes at paths inside the launcher's container (its
// mount namespace, reached through /proc/<pid>/root with every path resolved inside that root)
// to the launcher's user, read-write for it: the container runtime makes a volumeDevice's node
// root's (as virt-handler does for virt-launcher's block volumes). Equivalent to:
// nsenter -t PID -m chown UID:GID PATH && chmod u+rw PATH.
func OwnDeviceNodes(pid int, paths []string, u process.User) error {
	if len(paths) == 0 {
		return nil
	}
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("own device nodes: open the launcher's root: %w", err)
	}
	defer unix.Close(root)
	for _, p := range paths {
		if err := ownDeviceNode(root, p, u); err != nil {
			return fmt.Errorf("own device node %s of launcher %d: %w", p, pid, err)
		}
	}
	return nil
}

func ownDeviceNode(root int, p string, u process.User) error {
	fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return errNotBlock
	}
	if err := unix.Fchownat(fd, "", int(u.UID), int(u.GID), unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	if st.Mode&0o600 == 0o600 {
		return nil
	}
	// fchmod does not take an O_PATH descriptor; its /proc/self/fd link names the same node.
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), (st.Mode&0o7777)|0o600)
}
