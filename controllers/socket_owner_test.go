package controllers

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestHandSocket: the agent's socket becomes the launcher user's 0600; a symlink the user put
// in its place (to a root file) is refused and its target left alone.
func TestHandSocket(t *testing.T) {
	prereq.Root(t) // to chown
	dir := t.TempDir()
	path := filepath.Join(dir, "migration.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := storage.Owner{UID: 107, GID: 107}
	if err := handSocket(path, o); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 107 || st.Gid != 107 || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("socket: %v %d:%d, want a 0600 socket of 107:107", fi.Mode(), st.Uid, st.Gid)
	}

	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := handSocket(path, o); err == nil {
		t.Error("a symlink in place of the socket was handed over")
	}
	fi, err = os.Stat(victim)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o644 {
		t.Errorf("symlink target: %v %d:%d, want root's 0644 untouched", fi.Mode(), st.Uid, st.Gid)
	}
	// A plain file in its place is refused too.
	_ = os.Remove(path)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := handSocket(path, o); !errors.Is(err, errNotSocket) {
		t.Errorf("a regular file: %v, want errNotSocket", err)
	}
}
