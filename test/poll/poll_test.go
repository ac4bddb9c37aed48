package poll

import (
	"os"
	"os/exec"
	"testing"
)

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if Alive(pid) {
		t.Errorf("reaped process %d alive", pid)
	}
	if Alive(0) || Alive(-1) {
		t.Error("non-PIDs alive")
	}
}

func TestUntilAndTail(t *testing.T) {
	n := 0
	Until(t, 10e9, "third check", func() (bool, string) { n++; return n == 3, "" })
	if n != 3 {
		t.Errorf("checked %d times", n)
	}
	if Tail("abcdef", 3) != "...def" || Tail("ab", 3) != "ab" {
		t.Error("Tail")
	}
}
