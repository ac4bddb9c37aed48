package launcher

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestCheckPeer: only the socket itself, with a listener the check accepts, passes; a regular
// file, a symlink to a good socket and a refused listener are ErrNotLauncher.
func TestCheckPeer(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.sock")
	l, err := net.Listen("unix", good)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	self := func(pid int) error {
		if pid != os.Getpid() {
			return errors.New("not us")
		}
		return nil
	}
	file, link := filepath.Join(dir, "file.sock"), filepath.Join(dir, "link.sock")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := CheckPeer(ctx, good, self); err != nil {
		t.Errorf("the listener's own socket: %v", err)
	}
	refuse := func(int) error { return errors.New("another process") }
	for name, c := range map[string]struct {
		path  string
		check PeerCheck
	}{"regular file": {file, self}, "symlink": {link, self}, "refused listener": {good, refuse}} {
		if err := CheckPeer(ctx, c.path, c.check); !errors.Is(err, ErrNotLauncher) {
			t.Errorf("%s: %v, want ErrNotLauncher", name, err)
		}
	}
}
