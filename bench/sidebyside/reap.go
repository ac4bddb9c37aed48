package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// reapMain is `sidebyside reap -- CMD ARGS...`: it becomes a child subreaper
// (prctl PR_SET_CHILD_SUBREAPER), runs CMD, forwards SIGTERM/SIGINT to it, and reaps every
// orphan that lands on it at once. libvirtd daemonizes each QEMU (double fork): without a
// subreaper the orphan goes to this sandbox's PID 1, which reaps slowly, and DomainDestroy
// waits for that (BENCHMARKS-BASELINE.md: 1.8 s). When CMD exits, QEMUs it left are killed
// and reaped, and reap exits with CMD's status.
func reapMain(args []string) int {
	if len(args) == 0 || args[0] != "--" || len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sidebyside reap -- CMD [ARGS...]")
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "reap: set child subreaper: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "reap: start %s: %v\n", args[1], err)
		return 1
	}
	main := cmd.Process.Pid
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s) // the child may be gone already; its exit is reaped below
		}
	}()
	code := -1
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if errors.Is(err, syscall.ECHILD) {
			break
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "reap: wait: %v\n", err)
			return 1
		}
		if pid == main {
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			// What the daemon left behind (its QEMUs) is ours now: kill it, reap it below.
			for _, c := range children() {
				_ = syscall.Kill(c, syscall.SIGKILL) // may have exited meanwhile
			}
		}
	}
	return code
}

// children lists this process's children. Equivalent to `cat /proc/self/task/*/children`.
func children() []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}
