package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// errNoProcess: the process is gone (or is not the one recorded).
var errNoProcess = errors.New("no such process")

// procStat is what vmlet needs of /proc/PID/stat.
type procStat struct {
	State     byte   // R, S, D, Z, ...
	PPid      int    // parent
	StartTime uint64 // clock ticks after boot: with the pid, names one process for good
}

// parseStat parses the contents of /proc/PID/stat (proc(5)): the command name, in parentheses,
// may hold spaces and parentheses, so the fields are counted after its last ')'.
func parseStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("parse stat %q: too few fields", s)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat ppid: %w", err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("parse stat starttime: %w", err)
	}
	return procStat{State: f[0][0], PPid: ppid, StartTime: start}, nil
}

// readStat reads /proc/PID/stat; errNoProcess when there is no such process.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return procStat{}, fmt.Errorf("process %d: %w", pid, errNoProcess)
	}
	if err != nil {
		return procStat{}, fmt.Errorf("read process stat: %w", err)
	}
	return parseStat(string(b))
}

// exeOf is the process's executable (readlink /proc/PID/exe), without the " (deleted)" the
// kernel appends when the file was replaced since.
func exeOf(pid int) (string, error) {
	p, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH) {
		return "", fmt.Errorf("process %d: %w", pid, errNoProcess)
	}
	if err != nil {
		return "", fmt.Errorf("read process exe: %w", err)
	}
	return strings.TrimSuffix(p, " (deleted)"), nil
}

// pids lists the processes in /proc.
func pids() ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var ps []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			ps = append(ps, pid)
		}
	}
	return ps, nil
}

// childrenRunning lists this process's children whose executable is exe.
func childrenRunning(exe string) ([]int, error) {
	all, err := pids()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []int
	for _, pid := range all {
		st, err := readStat(pid)
		if err != nil || st.PPid != self || st.State == 'Z' {
			continue
		}
		if e, err := exeOf(pid); err == nil && e == exe {
			out = append(out, pid)
		}
	}
	return out, nil
}

// holders lists the processes that have file open (scanning /proc/*/fd, as `fuser FILE`).
func holders(file string) []int {
	all, err := pids()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range all {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if t, err := os.Readlink(fd); err == nil && t == file {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// terminate stops process pid, which need not be a child: SIGTERM, then SIGKILL after grace,
// and waits until it has exited (its pidfd is readable: exited, even if nobody reaped it yet).
// Equivalent to `kill PID; sleep GRACE; kill -9 PID` with the waits done on a pidfd.
func terminate(ctx context.Context, pid int, grace time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pidfd %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	if waitPidfd(ctx, fd, grace) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	if waitPidfd(ctx, fd, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d did not exit after SIGKILL: %w", pid, context.DeadlineExceeded)
}

// waitPidfd waits at most d (and while ctx lasts) for the process to exit.
func waitPidfd(ctx context.Context, fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll(fds, int(min(left, 100*time.Millisecond).Milliseconds())+1)
		if err == nil && n > 0 {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
}
