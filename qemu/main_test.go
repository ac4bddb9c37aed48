package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/test/prereq"
)

// helperEnv makes the test binary act as a process that starts a VM and then hangs (see
// TestQEMUDiesWithItsParent).
const helperEnv = "VMLET_QEMU_TEST_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
	os.Exit(m.Run())
}

// helperMain starts the VM described by specJSON (QMP socket next to nothing else: the spec's
// first disk-free form), prints "PID <qemu pid>" and blocks until killed.
func helperMain(specJSON string) int {
	var h struct {
		Spec   Spec
		Binary string
		QMP    string
	}
	if err := json.Unmarshal([]byte(specJSON), &h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm, err := Start(ctx, &h.Spec, StartOptions{Binary: h.Binary, Accel: &tcg, QMPSocket: h.QMP})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("PID %d\n", vm.Info().PID)
	select {}
}

// TestQEMUDiesWithItsParent: when the process that started QEMU is SIGKILLed (no cleanup runs
// at all), the kernel kills QEMU too (Pdeathsig on the thread that forked it), and a new Start
// on the same socket paths replaces the stale sockets left behind.
func TestQEMUDiesWithItsParent(t *testing.T) {
	bin := prereq.QEMU(t)
	dir := shortTempDir(t, "vp")
	spec := Spec{Name: "pdeathsig", MemoryMiB: 64, StartPaused: true,
		Agent: &Agent{Socket: filepath.Join(dir, "qga.sock")}}
	qmpSock := filepath.Join(dir, "qmp.sock")
	arg, err := json.Marshal(map[string]any{"Spec": spec, "Binary": bin, "QMP": qmpSock})
	if err != nil {
		t.Fatal(err)
	}
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+string(arg))
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // best effort: the test may have killed and reaped the helper already
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper did not report a qemu pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "PID ")))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd_open qemu %d: %v", pid, err)
	}
	defer unix.Close(pidfd)

	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait() // reap it; Wait reports the SIGKILL, which is expected
	// A pidfd becomes readable when the process exits.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, int(opTimeout/time.Millisecond))
	if err != nil || n != 1 {
		t.Fatalf("qemu %d still alive %s after its parent was killed (poll %d, %v)", pid, opTimeout, n, err)
	}

	// The helper could not clean up: its sockets are still there, stale.
	if _, err := os.Lstat(qmpSock); err != nil {
		t.Fatalf("expected a stale qmp socket: %v", err)
	}
	ctx := ctxT(t, bootTimeout)
	vm, err := Start(ctx, &spec, StartOptions{Binary: bin, Accel: &tcg, QMPSocket: qmpSock})
	if err != nil {
		t.Fatalf("Start over stale sockets: %v", err)
	}
	if err := vm.Kill(ctx); err != nil {
		t.Fatal(err)
	}
}
