package qemu

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// process is a started QEMU. One goroutine (started by startProcess) owns cmd.Wait; everyone
// else waits on done.
type process struct {
	cmd   *exec.Cmd
	done  chan struct{} // closed after Wait returned; state/waitErr are then set
	state *os.ProcessState
	err   error // Wait's error when state is nil
}

// startProcess execs binary with args, handing it files as fds 3, 4, ... It sets Pdeathsig
// SIGKILL, which the kernel ties to the thread that forked: the starting goroutine locks its OS
// thread and keeps it until the child is reaped, so QEMU cannot outlive us unnoticed, whatever
// the Go scheduler does with threads.
func startProcess(binary string, args []string, files []*os.File, stdout, stderr io.Writer) (*process, error) {
	cmd := exec.Command(binary, args...)
	cmd.ExtraFiles = files
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.state = cmd.ProcessState
		if p.state == nil {
			p.err = err
		}
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("exec %s: %w", binary, err)
	}
	return p, nil
}

// pid is QEMU's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// signal sends sig unless the process has been reaped (then it is a no-op).
func (p *process) signal(sig os.Signal) error {
	err := p.cmd.Process.Signal(sig)
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal qemu: %w", err)
	}
	return nil
}
