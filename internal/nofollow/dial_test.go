package nofollow

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestDialUnix: a real socket in a subfolder connects; a symlink to it (as the last component
// or as a folder on the way) and a regular file do not.
func TestDialUnix(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "sockets"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(root, "sockets", "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	ctx := context.Background()
	c, err := DialUnix(ctx, root, "sockets/s.sock")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
	c.Close()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("s.sock", filepath.Join(root, "sockets", "link.sock")))
	must(os.Symlink("sockets", filepath.Join(root, "dirlink")))
	must(os.WriteFile(filepath.Join(root, "sockets", "file"), nil, 0o600))
	for _, rel := range []string{"sockets/link.sock", "dirlink/s.sock", "../" + filepath.Base(root) + "/sockets/s.sock"} {
		if c, err := DialUnix(ctx, root, rel); err == nil {
			c.Close()
			t.Errorf("DialUnix %s connected, want refused (symlink or outside root)", rel)
		}
	}
	if _, err := DialUnix(ctx, root, "sockets/file"); !errors.Is(err, ErrNotSocket) {
		t.Errorf("DialUnix of a regular file: %v, want ErrNotSocket", err)
	}
	if _, err := DialUnix(ctx, filepath.Join(root, "dirlink"), "s.sock"); err == nil {
		t.Error("DialUnix with a symlinked root connected")
	}
}
