package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/storage/qemuimg"
)

// The VM folder belongs to the VM's user once Apply handed it over (Grants), and every
// launcher shares that user: whatever root reads or writes there again (a later Apply after
// an agent restart, a disk hotplug) may have been replaced by a symlink to a file of that
// user's choice. These helpers never follow one.

// maxStateBytes bounds what is read of the state file (it holds a few image digests).
const maxStateBytes = 1 << 20

// readNoFollow reads the regular file at path, refusing a symlink (O_NOFOLLOW) and anything
// but a regular file (a FIFO would block, a device never end) before reading, and at most max
// bytes. A missing file is fs.ErrNotExist.
func readNoFollow(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("read %s: %w (a symlink)", path, ErrOutsideRoot)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w (%v, not a regular file)", path, ErrOutsideRoot, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("read %s: more than %d bytes: %w", path, max, ErrConflict)
	}
	return b, nil
}

// writeNew replaces path by a file holding b, written under the temporary name tmp: a
// leftover at tmp (a killed Apply's, or a symlink someone planted) is unlinked, never written
// through, and tmp is created O_EXCL|O_NOFOLLOW, so the write lands in a file this call made.
// The rename replaces whatever is at path, a symlink included, without following it.
func writeNew(path, tmp string, b []byte, perm os.FileMode) error {
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// inspectInside is qemu-img info of path, a file inside vmDir, reached without following any
// symlink (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) and checked to be a regular file;
// qemu-img then reads that very file through /proc/<agent>/fd, not the path again.
// Equivalent to: test ! -L PATH && test -f PATH && qemu-img info -U PATH
func inspectInside(ctx context.Context, tool qemuimg.Tool, vmDir, path string) (*qemuimg.Info, error) {
	rel, err := filepath.Rel(vmDir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return nil, fmt.Errorf("inspect %s: %w %s", path, ErrOutsideRoot, vmDir)
	}
	root, err := unix.Open(vmDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	defer unix.Close(root)
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("inspect %s: %w %s (through a symlink)", path, ErrOutsideRoot, vmDir)
	case err != nil:
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("inspect %s: %w", path, ErrNotDiskFile)
	}
	return tool.Info(ctx, "/proc/"+strconv.Itoa(os.Getpid())+"/fd/"+strconv.Itoa(fd))
}
