package launcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHandOverDisk: image files travel over the hand-over socket and are pooled by disk id
// until taken (once); a second hand-over of the id replaces the first and closes its files;
// a pipe, a socket, no file or too many files are refused and nothing is pooled.
func TestHandOverDisk(t *testing.T) {
	l := &Launcher{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	sock := filepath.Join(t.TempDir(), "taps.sock")
	lis, err := listenTaps(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close(); l.disks.closeAll() })
	go l.serveTaps(lis)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir := t.TempDir()
	first, second := openRW(t, filepath.Join(dir, "first.raw")), openRW(t, filepath.Join(dir, "second.raw"))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sk := os.NewFile(uintptr(pair[0]), "sock")
	defer sk.Close()
	unix.Close(pair[1])
	for name, files := range map[string][]*os.File{
		"a pipe": {pr}, "a socket": {first, sk}, "no file": nil, "5 files": {first, first, first, first, first},
	} {
		if err := HandOverDisk(ctx, sock, "data", files); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("hand over %s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if got := l.disks.take("data"); got != nil {
		t.Fatalf("a refused hand-over was pooled: %v", got)
	}

	if err := HandOverDisk(ctx, sock, "data", []*os.File{first}); err != nil {
		t.Fatal(err)
	}
	l.disks.mu.Lock()
	pooled := l.disks.disks["data"][0]
	l.disks.mu.Unlock()
	if err := HandOverDisk(ctx, sock, "data", []*os.File{second}); err != nil {
		t.Fatal(err)
	}
	if pooled.Fd() != ^uintptr(0) {
		t.Error("the files of a replaced hand-over were not closed")
	}
	got := l.disks.take("data")
	if len(got) != 1 || !sameFile(t, got[0], second) {
		t.Fatalf("take = %v, want the second hand-over's file", got)
	}
	closeFiles(got)
	if again := l.disks.take("data"); again != nil {
		t.Error("files taken twice")
	}
	if err := HandOverDisk(ctx, sock, "other", []*os.File{first}); err != nil {
		t.Fatal(err)
	}
	l.disks.mu.Lock()
	pooled = l.disks.disks["other"][0]
	l.disks.mu.Unlock()
	l.disks.closeAll()
	if pooled.Fd() != ^uintptr(0) {
		t.Error("closeAll left a pooled file open")
	}
}

func openRW(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func sameFile(t *testing.T, a, b *os.File) bool {
	t.Helper()
	sa, err := a.Stat()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
}
