package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/poll"
)

// TestReap: a child that exited is reaped by reap (not left a zombie).
func TestReap(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	poll.Until(t, 30*time.Second, "child is a zombie", func() (bool, string) {
		s := procState(pid)
		return s == "Z", s
	})
	if n := reap(); n < 1 {
		t.Fatalf("reap() = %d, want ≥ 1", n)
	}
	if s := procState(pid); s != "" {
		t.Errorf("child %d still in /proc (state %s) after reap", pid, s)
	}
}

// TestSignals: the built program sleeps until SIGTERM or SIGINT and then exits 0.
func TestSignals(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "vmlet-pause")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Signal only once it said it runs (its handlers are installed then).
			line, err := bufio.NewReader(stderr).ReadString('\n')
			if err != nil || line != "vmlet-pause: running\n" {
				t.Fatalf("pause's first line %q (%v), want \"vmlet-pause: running\"", line, err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("pause after %s: %v, want exit 0", sig, err)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("pause still runs 30 s after %s", sig)
			}
		})
	}
}

// procState is the state letter of pid in /proc/PID/stat, "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return "?"
	}
	return s[i+2 : i+3]
}
