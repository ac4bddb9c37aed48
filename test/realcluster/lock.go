package realcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// acquireLock takes the machine's cluster lock, waiting until ctx ends while another cluster
// holds it. The returned file is passed to the daemons so that the lock lives as long as they do.
func acquireLock(ctx context.Context, log io.Writer) (*os.File, error) {
	f, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	for said := false; ; said = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("flock %s: %w", LockPath, err)
		}
		if !said {
			fmt.Fprintf(log, "realcluster: another cluster holds %s (%s); waiting\n", LockPath, lockHolders())
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("another cluster holds %s (vmlet-cluster down stops it): %w", LockPath, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// tryLock takes the lock if it is free (nil, nil when another process holds it).
func tryLock() (*os.File, error) {
	f, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("flock %s: %w", LockPath, err)
	}
	return f, nil
}

// lockHeld reports whether some process holds the cluster lock.
func lockHeld() bool {
	f, err := os.OpenFile(LockPath, os.O_RDWR, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// lockHolders names the processes that have the lock file open (for the waiting message).
func lockHolders() string {
	var out []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if t, err := os.Readlink(fd); err == nil && t == LockPath {
			pid := strings.Split(fd, "/")[2]
			if pid == strconv.Itoa(os.Getpid()) {
				continue
			}
			b, _ := os.ReadFile("/proc/" + pid + "/comm")
			out = append(out, pid+" "+strings.TrimSpace(string(b)))
		}
	}
	return "open in: " + strings.Join(out, ", ")
}
