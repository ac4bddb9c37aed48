package process

import (
	"fmt"
	"io/fs"
	"syscall"

	"github.com/vmlet/vmlet/storage"
)

// DefaultUID and DefaultGID are the launcher's user and group unless configured: KubeVirt's
// `qemu` user (107), which its virt-launcher runs as by default.
const (
	DefaultUID = 107
	DefaultGID = 107
)

// User is who a launcher (and the QEMU it starts, which inherits it) runs as.
type User struct {
	UID, GID uint32
	// Groups are the only supplementary groups (e.g. /dev/kvm's group where KVM is used);
	// none by default.
	Groups []uint32
}

// Root reports whether u leaves the launcher root (uid 0), with every capability.
func (u User) Root() bool { return u.UID == 0 }

// credential is what the child sets before it execs the launcher: setgroups(u.Groups) (an
// empty list clears the agent's), setgid, setuid. Leaving uid 0 this way clears the permitted,
// effective and ambient capability sets (no SECBIT_KEEP_CAPS).
//
// Equivalent to: setpriv --reuid U --regid G --groups GROUPS (or --clear-groups)
func (u User) credential() *syscall.Credential {
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: append([]uint32{}, u.Groups...)}
}

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// CheckSearchable is storage.CheckSearchable for u: every folder down to dir lets u through.
func CheckSearchable(dir string, u User, stat func(string) (fs.FileInfo, error)) error {
	return storage.CheckSearchable(dir, storage.User{UID: u.UID, GID: u.GID, Groups: u.Groups}, stat)
}
