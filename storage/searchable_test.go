package storage

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"
	"time"
)

type fakeInfo struct {
	mode     fs.FileMode
	uid, gid uint32
}

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode | fs.ModeDir }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return true }
func (f fakeInfo) Sys() any           { return &syscall.Stat_t{Uid: f.uid, Gid: f.gid} }

// TestCheckSearchable: a folder chain lets a user through by the owner, group or other x bit
// only, as the kernel decides; root always passes.
func TestCheckSearchable(t *testing.T) {
	u := User{UID: 107, GID: 107, Groups: []uint32{36}}
	for _, tc := range []struct {
		name string
		dirs map[string]fakeInfo
		u    User
		ok   bool
	}{
		{"other x", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o711, 0, 0}}, u, true},
		{"0700 root folder", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o700, 0, 0}}, u, false},
		{"owner x", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o700, 107, 0}}, u, true},
		{"owner without x though other has it", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o601, 107, 0}}, u, false},
		{"group x", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o710, 0, 107}}, u, true},
		{"supplementary group x", map[string]fakeInfo{"/": {0o755, 0, 0}, "/run": {0o710, 0, 36}}, u, true},
		{"an ancestor blocks", map[string]fakeInfo{"/": {0o700, 0, 0}, "/run": {0o711, 0, 0}}, u, false},
		{"root passes anything", map[string]fakeInfo{"/": {0o700, 0, 0}, "/run": {0o700, 0, 0}}, User{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stat := func(p string) (fs.FileInfo, error) {
				fi, ok := tc.dirs[p]
				if !ok {
					return nil, os.ErrNotExist
				}
				return fi, nil
			}
			err := CheckSearchable("/run", tc.u, stat)
			if tc.ok && err != nil {
				t.Errorf("want ok: %v", err)
			}
			if !tc.ok && !errors.Is(err, ErrNotSearchable) {
				t.Errorf("err %v, want ErrNotSearchable", err)
			}
		})
	}
}
