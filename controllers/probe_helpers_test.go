package controllers_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// probeEnv carries a probeRequest to this test binary run as a probe (see TestMain): a process
// the test places in a VM's cgroup, as that VM's user, to try what a compromised QEMU could.
const probeEnv = "VMLET_TEST_PROBE"

// probeOp is one attempt: open a path ("read", "write": O_RDWR), connect to a unix socket
// ("connect") or send signal 0 to a process ("signal").
type probeOp struct {
	Kind string `json:"kind"`
	Path string `json:"path,omitempty"`
	Pid  int    `json:"pid,omitempty"`
}

// probeRequest says who the probe becomes (UID 0: it stays root) and what it tries.
type probeRequest struct {
	UID, GID uint32
	Ops      []probeOp
}

// runProbe is the probe's main: it drops to req's user (setgroups, setgid, setuid: leaving
// uid 0 clears its capabilities), tries each operation and prints one errno name per
// operation ("" for success) as JSON.
func runProbe(raw string) int {
	var req probeRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil {
		fmt.Fprintln(os.Stderr, "probe request:", err)
		return 2
	}
	if req.UID != 0 {
		if err := syscall.Setgroups(nil); err != nil {
			fmt.Fprintln(os.Stderr, "setgroups:", err)
			return 2
		}
		if err := syscall.Setgid(int(req.GID)); err != nil {
			fmt.Fprintln(os.Stderr, "setgid:", err)
			return 2
		}
		if err := syscall.Setuid(int(req.UID)); err != nil {
			fmt.Fprintln(os.Stderr, "setuid:", err)
			return 2
		}
	}
	out := make([]string, len(req.Ops))
	for i, op := range req.Ops {
		out[i] = errnoName(probeOne(op))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 2
	}
	return 0
}

func probeOne(op probeOp) error {
	switch op.Kind {
	case "read", "write":
		flags := unix.O_RDONLY
		if op.Kind == "write" {
			flags = unix.O_RDWR
		}
		fd, err := unix.Open(op.Path, flags|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err == nil {
			_ = unix.Close(fd)
		}
		return err
	case "connect":
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Connect(fd, &unix.SockaddrUnix{Name: op.Path})
	case "signal":
		return unix.Kill(op.Pid, 0)
	}
	return unix.EINVAL
}

func errnoName(err error) string {
	if err == nil {
		return ""
	}
	var no unix.Errno
	if errors.As(err, &no) {
		return unix.ErrnoName(no)
	}
	return err.Error()
}

// probe runs this test binary as a probe: started directly into the cgroup folder cgroup
// ("" leaves it in the test's own), as uid:gid, trying ops. It returns one errno name per op.
// Equivalent to: echo $$ > CGROUP/cgroup.procs; setpriv --reuid U --regid G --clear-groups ...
func probe(t *testing.T, cgroup string, uid, gid uint32, ops []probeOp) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	req, err := json.Marshal(probeRequest{UID: uid, GID: gid, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), probeEnv+"="+string(req))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cgroup != "" {
		dir, err := os.Open(cgroup)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("probe in %q as %d:%d: %v: %s", cgroup, uid, gid, err, stderr.Bytes())
	}
	var out []string
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out) != len(ops) {
		t.Fatalf("probe output %q: %v", stdout.Bytes(), err)
	}
	return out
}
