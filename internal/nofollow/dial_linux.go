package nofollow

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotSocket is returned when the path names something other than a unix socket.
var ErrNotSocket = errors.New("not a unix socket")

// DialUnix connects to the unix socket rel (a path relative to root, e.g.
// "sockets/console.sock"). Every component of rel is resolved beneath root with no symlink
// followed (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, O_NOFOLLOW on root itself); the socket
// is opened O_PATH, checked to be a socket, and connected through /proc/self/fd, so what is
// connected is exactly the inode that was checked.
func DialUnix(ctx context.Context, root, rel string) (net.Conn, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open %s in %s: %w", rel, root, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s in %s: %w", rel, root, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("open %s in %s: %w", rel, root, ErrNotSocket)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
	if err != nil {
		return nil, fmt.Errorf("connect %s in %s: %w", rel, root, err)
	}
	return c, nil
}
