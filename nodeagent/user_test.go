package nodeagent

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers/process"
)

type kvmInfo struct {
	perm     fs.FileMode
	uid, gid uint32
}

func (k kvmInfo) Name() string       { return "kvm" }
func (k kvmInfo) Size() int64        { return 0 }
func (k kvmInfo) Mode() fs.FileMode  { return k.perm | fs.ModeDevice | fs.ModeCharDevice }
func (k kvmInfo) ModTime() time.Time { return time.Time{} }
func (k kvmInfo) IsDir() bool        { return false }
func (k kvmInfo) Sys() any           { return &syscall.Stat_t{Uid: k.uid, Gid: k.gid} }

// TestKVMGroup: where KVM is used, the launcher user gets /dev/kvm's group only when that is
// how it may open it, and a root-only /dev/kvm is refused with a clear error.
func TestKVMGroup(t *testing.T) {
	u := process.User{UID: 107, GID: 107}
	for _, tc := range []struct {
		name  string
		fi    kvmInfo
		group *uint32
		err   bool
	}{
		{"udev 0660 root:kvm", kvmInfo{0o660, 0, 36}, ptr(36), false},
		{"0666", kvmInfo{0o666, 0, 0}, nil, false},
		{"group is the launcher's", kvmInfo{0o660, 0, 107}, nil, false},
		{"root only", kvmInfo{0o600, 0, 0}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := kvmGroup(tc.fi, u)
			if tc.err != (err != nil) || (err != nil && !errors.Is(err, ErrBadFlag)) {
				t.Fatalf("err %v, want error %v", err, tc.err)
			}
			if (g == nil) != (tc.group == nil) || (g != nil && *g != *tc.group) {
				t.Errorf("group %v, want %v", g, tc.group)
			}
		})
	}
}

func ptr(v uint32) *uint32 { return &v }
