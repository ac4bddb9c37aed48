package podruntime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNoSuchPID means no child of the launcher has the PID it reported.
var ErrNoSuchPID = errors.New("no child of the launcher has that PID in its namespace")

// HostPID returns, in the agent's PID namespace, the PID of the process that launcher id
// reports as pid: the launcher runs in its pod's PID namespace (a kubelet gives each container
// one), so QEMU's PID as the launcher knows it names another process, or none, here. The
// launcher itself or one of its children (QEMU) may be asked for. It implements
// controllers.PIDMapper.
func (r *Runtime) HostPID(id string, pid int) (int, error) {
	lpid := r.serving(id)
	if lpid == 0 {
		return 0, fmt.Errorf("launcher %s: no launcher serving", id)
	}
	return hostPIDOf(lpid, pid)
}

// hostPIDOf finds, among parent and its children, the process whose PID in its innermost PID
// namespace is nspid (the last field of /proc/<pid>/status' NSpid line), and returns its PID
// here.
func hostPIDOf(parent, nspid int) (int, error) {
	cands := append([]int{parent}, children(parent)...)
	for _, p := range cands {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue // gone meanwhile
		}
		if inner, ok := innermostPID(string(b)); ok && inner == nspid {
			return p, nil
		}
	}
	return 0, fmt.Errorf("pid %d of launcher %d: %w", nspid, parent, ErrNoSuchPID)
}

// children lists the children of every thread of pid (/proc/<pid>/task/*/children: a Go
// program forks from whichever thread runs the goroutine).
func children(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// innermostPID is the last PID of the NSpid line of a /proc/<pid>/status: the process's PID in
// the PID namespace it lives in (the first is the PID in the reader's). Pure.
func innermostPID(status string) (int, bool) {
	for _, l := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(l, "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		p, err := strconv.Atoi(f[len(f)-1])
		return p, err == nil
	}
	return 0, false
}
