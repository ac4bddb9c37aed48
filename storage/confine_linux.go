package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// resolved is a host file found by openBeneath.
type resolved struct {
	path    string // the real path: symlink-free, what QEMU is given
	block   bool
	created bool
}

// openBeneath finds rel (a relative path) beneath root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_MAGICLINKS): ".." and symlinks may not lead out of root, absolute symlinks are
// refused altogether. With create, a missing file is made (O_CREAT|O_EXCL, never through a
// symlink) as a sparse file of size bytes. The file must be a regular file or a block device.
//
// The real path is then given to QEMU, which opens it itself: whoever can rename things inside
// root could still swap a component in between, so root must not be writable by the guest's
// owner alone to matter.
func openBeneath(root, rel string, create bool, size int64) (*resolved, error) {
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", root, err)
	}
	defer unix.Close(rootFD)
	realRoot, err := fdPath(rootFD)
	if err != nil {
		return nil, err
	}
	const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS
	r := &resolved{}
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolve})
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = unix.Openat2(rootFD, rel, &unix.OpenHow{
			Flags: unix.O_RDWR | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Mode:  0o660, Resolve: resolve})
		if err == nil {
			r.created = true
			if err = unix.Ftruncate(fd, size); err != nil {
				unix.Close(fd)
				_ = unix.Unlinkat(rootFD, rel, 0)
				return nil, fmt.Errorf("create %s: %w", filepath.Join(root, rel), err)
			}
		}
	}
	switch {
	case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s: %w %s (through a symlink or ..)", filepath.Join(root, rel), ErrOutsideRoot, root)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("%s: %w", filepath.Join(root, rel), ErrNotFound)
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("resolve %s: openat2 needs Linux 5.6: %w", rel, ErrUnsupportedMode)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", filepath.Join(root, rel), err)
	}
	defer unix.Close(fd)
	if r.path, err = fdPath(fd); err != nil {
		return nil, err
	}
	if !beneath(realRoot, r.path) {
		return nil, fmt.Errorf("%s resolved to %s: %w %s", filepath.Join(root, rel), r.path, ErrOutsideRoot, realRoot)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", r.path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFBLK:
		r.block = true
	default:
		return nil, fmt.Errorf("%s: %w", r.path, ErrNotDiskFile)
	}
	return r, nil
}

// statDisk checks that p (an administrator-configured path, symlinks allowed) is a regular
// file or block device and returns its real path.
func statDisk(p string, wantBlock bool) (*resolved, error) {
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", p, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	block := fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	if (wantBlock && !block) || (!block && !fi.Mode().IsRegular()) {
		return nil, fmt.Errorf("%s (want block device %v): %w", p, wantBlock, ErrNotDiskFile)
	}
	return &resolved{path: real, block: block}, nil
}

func fdPath(fd int) (string, error) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", fmt.Errorf("resolve fd: %w", err)
	}
	return p, nil
}

// grantInside carries out a grant for a path inside the VM folder vmDir, resolved without
// following any symlink (openat2 RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH) and changed through the
// file it opened, so that nothing the VM's user renamed or planted there redirects the chown.
// Equivalent to: chown -h UID:GID PATH && chmod MODE PATH, refusing symlinks on the way.
func grantInside(vmDir string, gr Grant) error {
	rel, err := filepath.Rel(vmDir, gr.Path)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("hand %s over: %w %s", gr.Path, ErrOutsideRoot, vmDir)
	}
	rootFD, err := unix.Open(vmDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("hand %s over: %w", gr.Path, err)
	}
	defer unix.Close(rootFD)
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("hand %s over: %w %s (through a symlink)", gr.Path, ErrOutsideRoot, vmDir)
	case err != nil:
		return fmt.Errorf("hand %s over: %w", gr.Path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, gr.UID, gr.GID); err != nil {
		return fmt.Errorf("hand %s to %d:%d: %w", gr.Path, gr.UID, gr.GID, err)
	}
	if gr.Mode != 0 {
		if err := unix.Fchmod(fd, uint32(gr.Mode.Perm())); err != nil {
			return fmt.Errorf("hand %s to %d:%d: %w", gr.Path, gr.UID, gr.GID, err)
		}
	}
	return nil
}
