package qemu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// listenUnix binds and listens on a unix stream socket at path and returns the listening
// socket as a file to hand to QEMU (close-on-exec in this process; exec.Cmd.ExtraFiles clears
// it in the child). A stale socket file nobody listens on is replaced; anything else at path is
// an error.
//
// Listening before QEMU starts means a client can connect at once (the connection waits in the
// backlog), and sees EOF as soon as QEMU dies, once this process closed its copy.
func listenUnix(path string) (*os.File, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("create socket %s: %w", path, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		unix.Close(fd)
		os.Remove(path)
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		unix.Close(fd)
		os.Remove(path)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// removeStaleSocket removes path if it is a unix socket that refuses connections.
func removeStaleSocket(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("bind %s: %w (not a socket)", path, fs.ErrExist)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("create socket %s: %w", path, err)
	}
	defer unix.Close(fd)
	err = unix.Connect(fd, &unix.SockaddrUnix{Name: path})
	if err == nil {
		return fmt.Errorf("bind %s: %w (a live process listens there)", path, fs.ErrExist)
	}
	if !errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("probe socket %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}
