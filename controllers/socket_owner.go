package controllers

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/storage"
)

// errNotSocket: what the agent just bound is no longer a socket at that path.
var errNotSocket = errors.New("not the agent's socket")

// handSocket gives the unix socket the agent bound at path to o, mode 0600. The path lies in
// the launcher's run folder, which the launcher's user owns: it could swap the socket for a
// symlink to any file between bind and chown. So the node is opened without following a
// symlink, checked to be a socket, and changed through that open file.
// Equivalent to: chown -h UID:GID PATH && chmod 0600 PATH (refusing anything but a socket).
func handSocket(path string, o storage.Owner) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hand socket %s over: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("hand socket %s over: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("hand socket %s over: %w (mode %o)", path, errNotSocket, st.Mode)
	}
	if err := unix.Fchownat(fd, "", o.UID, o.GID, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("hand socket %s to %d:%d: %w", path, o.UID, o.GID, err)
	}
	// An O_PATH descriptor takes no fchmod; its /proc link reaches that very node.
	if err := os.Chmod("/proc/self/fd/"+strconv.Itoa(fd), 0o600); err != nil {
		return fmt.Errorf("hand socket %s over: %w", path, err)
	}
	return nil
}
