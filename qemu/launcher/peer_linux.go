package launcher

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/vmlet/vmlet/internal/nofollow"
)

// ErrNotLauncher means a launcher socket path is not the launcher's: not a socket (a regular
// file, a symlink, e.g. to another VM's socket), or served by a process the caller's check
// refused (another listener).
var ErrNotLauncher = errors.New("not this VM's launcher socket")

// PeerCheck accepts or refuses the process (pid in the caller's PID namespace) listening on a
// launcher socket.
type PeerCheck func(pid int) error

// WithPeerCheck makes Dial connect only to the socket file itself (never through a symlink,
// never to something that is not a socket) and only to a listener check accepts (SO_PEERCRED):
// a run folder the launcher's user can write cannot point the agent at another VM's launcher.
// Dial checks once before it connects, so that a refused socket fails at once, and the
// connection's dialer checks every (re)connect.
func WithPeerCheck(check PeerCheck) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return dialChecked(ctx, strings.TrimPrefix(strings.TrimPrefix(addr, "unix://"), "unix:"), check)
	})
}

// CheckPeer connects to the socket at path as WithPeerCheck does and hangs up.
func CheckPeer(ctx context.Context, path string, check PeerCheck) error {
	c, err := dialChecked(ctx, path, check)
	if err != nil {
		return err
	}
	return c.Close()
}

func dialChecked(ctx context.Context, path string, check PeerCheck) (net.Conn, error) {
	// The socket file itself: no symlink followed, nothing but a socket connected.
	c, err := nofollow.DialUnix(ctx, filepath.Dir(path), filepath.Base(path))
	if errors.Is(err, nofollow.ErrNotSocket) || errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: %w: %w", path, ErrNotLauncher, err)
	}
	if err != nil {
		return nil, err
	}
	pid, err := peerPID(c.(*net.UnixConn))
	if err == nil {
		err = check(pid)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: listener pid %d: %w: %w", path, pid, ErrNotLauncher, err)
	}
	return c, nil
}

// peerPID is the pid of the process at the other end (SO_PEERCRED).
func peerPID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("read peer credentials: %w", serr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("peer pid %d is outside this PID namespace", cred.Pid)
	}
	return int(cred.Pid), nil
}
