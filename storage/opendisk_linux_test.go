package storage_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/storage"
)

// TestOpenDisk: a writable disk gets a read-write and a read-only file, a read-only disk one
// read-only file; a symlink in place of an image, a FIFO and a character device are refused
// (ErrOutsideRoot) without blocking.
func TestOpenDisk(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, []byte("DISK"), 0o600); err != nil {
		t.Fatal(err)
	}
	accmode := func(f *os.File) int {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl & unix.O_ACCMODE
	}
	for _, tc := range []struct {
		readOnly bool
		want     []int
	}{{false, []int{unix.O_RDWR, unix.O_RDONLY}}, {true, []int{unix.O_RDONLY}}} {
		files, err := storage.OpenDisk(img, tc.readOnly)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, f := range files {
			got = append(got, accmode(f))
			f.Close()
		}
		if len(got) != len(tc.want) || got[0] != tc.want[0] {
			t.Errorf("read-only %v: access modes %v, want %v", tc.readOnly, got, tc.want)
		}
	}
	link := filepath.Join(dir, "link.img")
	if err := os.Symlink(img, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, fifo, "/dev/null"} {
		if files, err := storage.OpenDisk(p, false); !errors.Is(err, storage.ErrOutsideRoot) {
			t.Errorf("%s: %v (%d files), want ErrOutsideRoot", p, err, len(files))
		}
	}
}
