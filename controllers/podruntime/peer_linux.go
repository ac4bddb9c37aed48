package podruntime

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// peerPID connects to the unix socket at path and returns the listening process's PID in this
// process's PID namespace (SO_PEERCRED).
func peerPID(path string) (int, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, fmt.Errorf("dial launcher socket: %w", err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("launcher socket: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("launcher socket: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("read launcher socket peer credentials: %w", serr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("launcher socket peer: pid %d is outside this PID namespace", cred.Pid)
	}
	return int(cred.Pid), nil
}

// startTime is the process's start time in clock ticks since boot (field 22 of
// /proc/<pid>/stat): with the PID it names one process, whatever reuses the PID later.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// Fields after the command: state is field 3, starttime field 22 → index 19 here.
	if len(f) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	if f[0] == "Z" {
		return 0, fmt.Errorf("process %d is a zombie", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// cgroupOf is the cgroup-v2 path of pid relative to the cgroup2 mount ("0::/path").
func cgroupOf(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("read cgroup of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "0::"); ok {
			if strings.HasPrefix(rest, "/..") {
				// Relative to a cgroup namespace root the launcher is outside of.
				return "", fmt.Errorf("cgroup of %d is %s: the agent runs in a private cgroup namespace; run it in the host's", pid, rest)
			}
			return rest, nil
		}
	}
	return "", fmt.Errorf("process %d has no cgroup-v2 entry", pid)
}
