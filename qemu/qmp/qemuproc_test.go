package qmp_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
)

// qemuProc is a real QEMU (TCG, no guest, paused with -S) with its QMP socket.
type qemuProc struct {
	Sock   string
	Cmd    *exec.Cmd
	exited chan struct{} // closed when the one goroutine owning Wait returns
	err    error         // Wait's result, valid after exited
}

// Wait returns the channel closed when QEMU has exited.
func (q *qemuProc) Exited() <-chan struct{} { return q.exited }

// startQEMU starts qemu-system-x86_64 with its QMP server on a unix socket that the test creates
// and listens on before QEMU starts (handed over as fd 3): the socket accepts connections the
// moment Start returns, so nobody polls for the path to appear. QEMU is killed and reaped at
// cleanup, and the socket removed.
//
// Equivalent to: qemu-system-x86_64 -machine q35 -accel tcg -nodefaults -nographic -S
// -chardev socket,id=qmp,fd=3,server=on,wait=off -mon chardev=qmp,mode=control
func startQEMU(t testing.TB) *qemuProc {
	t.Helper()
	bin := prereq.QEMU(t)
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatalf("listen on qmp socket: %v", err)
	}
	ln.SetUnlinkOnClose(false) // QEMU owns the listening socket from now on
	f, err := ln.File()
	_ = ln.Close()
	if err != nil {
		t.Fatalf("qmp listener file: %v", err)
	}
	defer f.Close()

	var stderr logbuf.Buffer
	cmd := exec.Command(bin, "-machine", "q35", "-accel", "tcg", "-nodefaults", "-nographic", "-S",
		"-m", "64", "-chardev", "socket,id=qmp,fd=3,server=on,wait=off", "-mon", "chardev=qmp,mode=control")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	q := &qemuProc{Sock: sock, Cmd: cmd, exited: make(chan struct{})}
	go func() {
		q.err = cmd.Wait()
		close(q.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-q.exited
		_ = os.Remove(sock)
		if t.Failed() {
			t.Logf("qemu stderr: %s", stderr.String())
		}
	})
	return q
}
