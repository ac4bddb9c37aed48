package podruntime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

var _ controllers.PIDMapper = (*Runtime)(nil)

func TestInnermostPID(t *testing.T) {
	for _, tt := range []struct {
		status string
		want   int
		ok     bool
	}{
		{"Name:\tqemu\nNSpid:\t4242\t7\nPPid:\t1\n", 7, true},
		{"Name:\tsh\nNSpid:\t99\n", 99, true},
		{"Name:\tx\nNSpid:\t12\t3\t1\n", 1, true},
		{"Name:\tx\nPid:\t12\n", 0, false},
		{"NSpid:\n", 0, false},
	} {
		got, ok := innermostPID(tt.status)
		if got != tt.want || ok != tt.ok {
			t.Errorf("innermostPID(%q) = %d, %v; want %d, %v", tt.status, got, ok, tt.want, tt.ok)
		}
	}
}

// TestHostPIDOfChildInPIDNamespace: a process in a PID namespace of its own (as a launcher in
// its pod) starts a child and reports the child's PID as it sees it; hostPIDOf finds that
// child's PID in this namespace (a different number), and refuses a PID no child has.
func TestHostPIDOfChildInPIDNamespace(t *testing.T) {
	prereq.Root(t)
	cmd := exec.Command("sh", "-c", "sleep 300 & echo $!; wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	nspid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	host, err := hostPIDOf(cmd.Process.Pid, nspid)
	if err != nil {
		t.Fatal(err)
	}
	if host == nspid {
		t.Fatalf("host pid %d equals the namespace's %d: not in a namespace of its own", host, nspid)
	}
	// The forked child runs sh's code until it execs sleep.
	poll.Until(t, 10*time.Second, "the child execs sleep", func() (bool, string) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(host) + "/cmdline")
		return err == nil && strings.HasPrefix(string(b), "sleep\x00"), fmt.Sprintf("pid %d: %q (%v)", host, b, err)
	})
	if self, err := hostPIDOf(cmd.Process.Pid, 1); err != nil || self != cmd.Process.Pid {
		t.Errorf("hostPIDOf(parent, 1) = %d, %v; want the parent %d", self, err, cmd.Process.Pid)
	}
	if _, err := hostPIDOf(cmd.Process.Pid, nspid+1000); !errors.Is(err, ErrNoSuchPID) {
		t.Errorf("a PID no child has: %v, want ErrNoSuchPID", err)
	}
}
