package selinuxlabel

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/opencontainers/selinux/go-selinux"
)

// ErrDisabled is a process-label call on a node whose SELinux is disabled: nothing was asked
// of the kernel (it would answer EINVAL).
var ErrDisabled = errors.New("selinux is disabled on this node")

// processCalls counts the process-label calls made of the kernel (ProcessCalls).
var processCalls atomic.Int64

// ProcessCalls is how many process-label calls (exec label set, /proc/PID/attr/current read)
// this process made of the kernel: tests prove that a disabled node makes none.
func ProcessCalls() int64 { return processCalls.Load() }

// ProcessLabel reads the label of process pid (ErrDisabled where SELinux is disabled).
// Equivalent to: cat /proc/PID/attr/current
func ProcessLabel(pid int) (Context, error) {
	if !selinux.GetEnabled() {
		return Context{}, ErrDisabled
	}
	processCalls.Add(1)
	s, err := selinux.PidLabel(pid)
	if err != nil {
		return Context{}, fmt.Errorf("read label of process %d: %w", pid, err)
	}
	return ParseContext(s)
}

// WithExecLabel runs start (which forks and execs a child) on a locked OS thread whose exec
// label is c, so that the child runs as c; the thread's exec label is cleared afterwards.
// ErrDisabled (start not called) where SELinux is disabled. Under no_new_privs (a non-root
// launcher) the policy must allow the transition (nnp_transition) or the exec fails.
// Equivalent to: runcon CONTEXT COMMAND
func WithExecLabel(c Context, start func() error) error {
	if !selinux.GetEnabled() {
		return ErrDisabled
	}
	runtime.LockOSThread()
	processCalls.Add(1)
	if err := selinux.SetExecLabel(c.String()); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("set exec label %s: %w", c, err)
	}
	err := start()
	if cerr := selinux.SetExecLabel(""); cerr != nil {
		// The thread keeps the label: stay locked, so Go discards the thread with it.
		return errors.Join(err, fmt.Errorf("clear exec label: %w", cerr))
	}
	runtime.UnlockOSThread()
	return err
}
