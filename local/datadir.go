package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// ErrDataDirLocked is returned when a process this vmlet did not start holds etcd's data.
var ErrDataDirLocked = errors.New("etcd data folder locked")

// etcdLockFiles are the files an etcd running on dataDir keeps locked: its WAL segments (an
// exclusive OFD lock) and the bbolt database (flock). A second etcd on the folder waits on the
// database's lock for good, which is how a leftover etcd made `vmlet local` hang.
func etcdLockFiles(dataDir string) []string {
	wals, _ := filepath.Glob(filepath.Join(dataDir, "member", "wal", "*.wal"))
	return append(wals, filepath.Join(dataDir, "member", "snap", "db"))
}

// lockedFile reports whether another process holds file locked (an OFD/POSIX write lock or a
// flock): equivalent to `flock -n FILE true` plus F_OFD_GETLK. A missing file is not locked.
func lockedFile(file string) (bool, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", file, err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		return false, fmt.Errorf("query lock of %s: %w", file, err)
	}
	if lk.Type != unix.F_UNLCK {
		return true, nil
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return true, nil
		}
		return false, fmt.Errorf("try lock %s: %w", file, err)
	}
	return false, nil // the flock goes with f
}

// dataDirLocked returns the first locked file of etcd's data in dataDir, or "".
func dataDirLocked(dataDir string) (string, error) {
	for _, f := range etcdLockFiles(dataDir) {
		locked, err := lockedFile(f)
		if err != nil {
			return "", err
		}
		if locked {
			return f, nil
		}
	}
	return "", nil
}

// waitDataDirFree waits up to d until no process holds etcd's data in dataDir locked (a
// leftover etcd just stopped releases it when the kernel closes its files). If it stays
// locked, the error names the processes that hold it: never one this vmlet recorded, so they
// are not stopped.
func waitDataDirFree(ctx context.Context, dataDir string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		f, err := dataDirLocked(dataDir)
		if err != nil {
			return err
		}
		if f == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w: %s is held by %s, which this vmlet did not start; stop it",
				dataDir, ErrDataDirLocked, f, describePids(holders(f)))
		case <-t.C:
		}
	}
}

func describePids(ps []int) string {
	if len(ps) == 0 {
		return "an unknown process"
	}
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		exe, _ := exeOf(p)
		s += fmt.Sprintf("pid %d (%s)", p, exe)
	}
	return s
}
