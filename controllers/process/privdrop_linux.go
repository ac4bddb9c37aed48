package process

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/osthread"
)

// startWithoutPrivileges runs start (which forks the launcher) on a locked OS thread that has
// first emptied its capability bounding set and set no_new_privs: a child inherits both from the
// thread that forks it. Together with the child's setuid to a non-root user (User.credential)
// the launcher then has no capability in any set, and no execve (a setuid binary, file
// capabilities) can give it one. The thread is never unlocked, so Go discards it afterwards and
// the agent's other threads (its main thread always) keep their privileges.
//
// Equivalent to: setpriv --bounding-set=-all --no-new-privs ... (before the user switch)
func startWithoutPrivileges(start func() error) error {
	// Never on the main thread (osthread): a wedged main thread would show the reduced
	// privileges as the agent's in /proc/PID/status.
	return osthread.Discarded(func() error {
		if err := dropThreadPrivileges(); err != nil {
			return err
		}
		return start()
	})
}

// dropThreadPrivileges empties the calling thread's bounding set and sets no_new_privs.
func dropThreadPrivileges() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	return nil
}

// lastCap is the highest capability number this kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	return n, nil
}
