package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrStateDirInUse is returned when another `vmlet local` runs on the same state folder.
var ErrStateDirInUse = errors.New("state folder in use")

// stateLock is an exclusive lock on a state folder, held for a `vmlet local`'s lifetime.
type stateLock struct{ f *os.File }

// lockStateDir takes the state folder's lock without waiting (equivalent: `flock -n
// DIR/lock`) and writes this process's pid into it for the error another instance prints. The
// lock goes with the process, however it ends; the file is close-on-exec, so no child holds it.
func lockStateDir(dir string) (*stateLock, error) {
	p := filepath.Join(dir, "lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(p)
			return nil, fmt.Errorf("lock %s: %w by another vmlet local (pid %s): stop it first, or use another --state-dir",
				dir, ErrStateDirInUse, strings.TrimSpace(string(b)))
		}
		return nil, fmt.Errorf("lock state folder: %w", err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write state lock: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write state lock: %w", err)
	}
	return &stateLock{f: f}, nil
}

// unlock releases the lock.
func (l *stateLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("release state lock: %w", err)
	}
	return nil
}
