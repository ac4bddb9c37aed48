package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// nobody runs every QEMU, launcher and libvirt daemon of the benchmark (Debian's unprivileged
// user): the same uid in every mode, and KubeVirt's non-root shape for libvirt.
const nobody = 65534

// asNobody makes cmd run as nobody:nogroup, die with this process (Pdeathsig) and in its own
// process group (so a terminal's ^C reaches only this program, which cleans up).
func asNobody(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
		Pdeathsig:  syscall.SIGKILL,
		Setpgid:    true,
	}
}

// memUsage is one process's memory from /proc/PID/smaps_rollup, in bytes.
type memUsage struct {
	RSS, PSS float64
}

func (m memUsage) add(o memUsage) memUsage { return memUsage{m.RSS + o.RSS, m.PSS + o.PSS} }

// readMem reads Rss and Pss of pid. Equivalent to `grep -E '^(Rss|Pss):' /proc/PID/smaps_rollup`.
func readMem(pid int) (memUsage, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return memUsage{}, fmt.Errorf("read smaps_rollup: %w", err)
	}
	var m memUsage
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "Rss:":
			m.RSS = v * 1024
		case "Pss:":
			m.PSS = v * 1024
		}
	}
	return m, nil
}

// sumMem adds up the memory of pids.
func sumMem(pids []int) (memUsage, error) {
	var total memUsage
	for _, pid := range pids {
		m, err := readMem(pid)
		if err != nil {
			return total, fmt.Errorf("read memory of pid %d: %w", pid, err)
		}
		total = total.add(m)
	}
	return total, nil
}

// qemuPID finds the QEMU process running the guest called name (its command line has
// "-name guest=NAME,"), whoever started it. Equivalent to `pgrep -f "guest=NAME,"`.
func qemuPID(name string) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("list /proc: %w", err)
	}
	want := []byte("guest=" + name + ",")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // gone meanwhile
		}
		argv0 := string(bytes.SplitN(cl, []byte{0}, 2)[0])
		if strings.HasPrefix(filepath.Base(argv0), "qemu-system") && bytes.Contains(cl, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("find qemu of %s: %w", name, os.ErrNotExist)
}

// waitPidGone waits until pid has exited, on a pidfd (readable once the process is gone).
func waitPidGone(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open pidfd %d: %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		ms := 1000
		if dl, ok := ctx.Deadline(); ok {
			ms = int(min(time.Until(dl), time.Second).Milliseconds())
		}
		if ms <= 0 || ctx.Err() != nil {
			return fmt.Errorf("wait for pid %d to exit: %w", pid, context.DeadlineExceeded)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}

// killAndWait sends SIGKILL to pid and waits until it is gone (cleanup of a process this
// program started, directly or through a daemon it started).
func killAndWait(ctx context.Context, pid int) error {
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill pid %d: %w", pid, err)
	}
	return waitPidGone(ctx, pid)
}

// readPidFile reads a daemon's pid file.
func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse pid file %s: %w", path, err)
	}
	return pid, nil
}
