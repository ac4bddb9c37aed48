package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotSearchable means a folder above a VM's files does not let its QEMU user through.
var ErrNotSearchable = errors.New("folder not searchable by the VM's user")

// User is a process's ids for permission checks.
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary
}

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// CheckSearchable returns ErrNotSearchable unless u may search (x) every folder from / down to
// dir, by the owner, group or other bits (as the kernel decides for a process with u's ids;
// ACLs are not read). uid 0 passes. stat is os.Stat in production.
func CheckSearchable(dir string, u User, stat func(string) (fs.FileInfo, error)) error {
	if u.UID == 0 {
		return nil
	}
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		fi, err := stat(p)
		if err != nil {
			return fmt.Errorf("check %s: %w", dir, err)
		}
		if !mayMode(fi, u, 0o1) {
			return fmt.Errorf("check %s: %s (%v): %w %s", dir, p, fi.Mode().Perm(), ErrNotSearchable, u)
		}
		if p == "/" || p == "." {
			return nil
		}
	}
}

// mayMode reports whether u gets the permission bits want (4 r, 2 w, 1 x) on fi by plain
// owner/group/other DAC (no ACLs).
func mayMode(fi fs.FileInfo, u User, want os.FileMode) bool {
	perm := fi.Mode().Perm()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return perm&want == want
	}
	switch {
	case st.Uid == u.UID:
		return (perm>>6)&want == want
	case st.Gid == u.GID || inGroups(st.Gid, u.Groups):
		return (perm>>3)&want == want
	}
	return perm&want == want
}

func inGroups(g uint32, gs []uint32) bool {
	for _, x := range gs {
		if x == g {
			return true
		}
	}
	return false
}
