package storage

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenDisk opens a prepared disk for handing to a launcher (whose QEMU then needs no access to
// the path: a hot-plugged claim is not mounted in a launcher pod). A writable disk gets a
// read-write and a read-only file (QEMU takes from an fd set the file whose access mode it
// asks for, and may reopen an image read-only), a read-only disk a read-only one. The files
// are close-on-exec; the caller closes them.
//
// A disk's file is opened without following a symlink: a disk image lives in a folder the
// launchers' user owns (a claim's folder, the VM's), where one could replace it by a link to a
// file of its choice for root to open. A block device beneath /dev is the volume's own path
// (a local volume may name /dev/disk/by-id/…), and /dev is root's: it may be a link. Anything
// that is neither a regular file nor a block device is refused before it is handed on.
func OpenDisk(path string, readOnly bool) ([]*os.File, error) {
	modes := []int{os.O_RDWR, os.O_RDONLY}
	if readOnly {
		modes = modes[1:]
	}
	var files []*os.File
	for _, m := range modes {
		f, err := openDisk(path, m)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

func openDisk(path string, mode int) (*os.File, error) {
	flags := mode | unix.O_CLOEXEC | unix.O_NONBLOCK
	if !strings.HasPrefix(path, "/dev/") {
		flags |= unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("open disk %s: %w (a symlink)", path, ErrOutsideRoot)
	}
	if err != nil {
		return nil, fmt.Errorf("open disk: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open disk %s: %w", path, err)
	}
	if t := fi.Mode().Type(); !fi.Mode().IsRegular() && t != os.ModeDevice {
		f.Close()
		return nil, fmt.Errorf("open disk %s: %w (%v, neither a regular file nor a block device)", path, ErrOutsideRoot, t)
	}
	// O_NONBLOCK only kept a FIFO from blocking the open; QEMU's I/O on the disk blocks.
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		f.Close()
		return nil, fmt.Errorf("open disk %s: %w", path, err)
	}
	return f, nil
}
