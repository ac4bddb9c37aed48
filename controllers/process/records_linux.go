package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu"
)

// A non-root launcher owns its run folder, and every launcher shares that user: any of their
// processes may plant a symlink (or a FIFO) at a name the agent, which is root, reads or writes
// there. These helpers never open through one.

// ErrNotRegular is returned for a run folder record that is a symlink or not a regular file.
var ErrNotRegular = errors.New("not a regular file (a symlink or something planted)")

// maxRecordBytes bounds a pid or exit record.
const maxRecordBytes = 4096

// openLog opens (creating) the launcher's log for appending, never through a symlink nor into
// anything but a regular file (qemu.OpenLog).
func openLog(path string) (*os.File, error) {
	f, err := qemu.OpenLog(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open launcher log: %w", err)
	}
	return f, nil
}

// writeRecord replaces dir/name by a file holding b (0600): written into a fresh temporary
// file (O_EXCL, a random name) and renamed over name, which replaces a planted symlink itself
// rather than writing through it.
func writeRecord(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// readRecord reads a small record file, refusing a symlink and anything but a regular file.
// A missing file is os.ErrNotExist.
func readRecord(path string) ([]byte, error) {
	f, _, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRecordBytes))
}

// openRegular opens path for reading, refusing a symlink and anything but a regular file (a
// FIFO does not block the open). A missing file is os.ErrNotExist.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, nil, fmt.Errorf("read %s: %w", path, ErrNotRegular)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("read %s: %w", path, ErrNotRegular)
	}
	return f, fi, nil
}

// logTailLines is how many of its log's last lines tell how a failed launcher ended.
const logTailLines = 3

// logTail returns the last n non-empty lines of the log at path (from its last maxRecordBytes),
// joined by newlines, "" when it cannot be read; like readRecord it never reads through a
// symlink nor anything but a regular file. Whoever shows it cleans it (vmistatus.WithDetail).
func logTail(path string, n int) string {
	f, fi, err := openRegular(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	off := max(fi.Size()-maxRecordBytes, 0)
	b := make([]byte, fi.Size()-off)
	k, err := f.ReadAt(b, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	lines := strings.Split(string(b[:k]), "\n")
	if off > 0 && len(lines) > 0 {
		lines = lines[1:] // cut in the middle
	}
	var out []string
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			out = append([]string{l}, out...)
		}
	}
	return strings.Join(out, "\n")
}
