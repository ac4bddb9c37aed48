package realcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// acquireLock takes the machine's cluster lock, waiting until ctx ends while another cluster
// holds it. The returned file is passed to the daemons so that the lock lives as long as they do.
func acquireLock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(LockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("flock %s: %w", LockPath, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("another cluster holds %s (vmlet-cluster down stops it): %w", LockPath, ctx.Err())
		case <-time.After(time.Second):
		}
	}
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
