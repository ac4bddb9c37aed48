package testguest

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// ConsoleRoundTrip runs cmd, a console client of the test guest (`vmctl console NAME`), on a
// terminal (a pty) as a person would: it types a shell command, waits (a minute at most) for
// the guest shell's answer, then types Ctrl-] and expects cmd to exit 0.
func ConsoleRoundTrip(t testing.TB, cmd *exec.Cmd) {
	t.Helper()
	term, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(term)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "vmctl-42-ok") {
				found <- true
				_, _ = io.Copy(io.Discard, term)
				return
			}
		}
		found <- false
	}()
	if _, err := io.WriteString(term, "echo vmctl-$((6*7))-ok\r"); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-found:
		if !ok {
			t.Errorf("%s: the terminal closed without the command's answer", cmd.Args)
		}
	case <-time.After(time.Minute):
		t.Errorf("%s: no answer from the guest's shell within a minute", cmd.Args)
	}
	if _, err := term.Write([]byte{0x1d}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s after Ctrl-]: %v", cmd.Args, err)
	}
}
