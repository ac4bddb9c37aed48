package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/subresclient/subrestest"
)

// ptyTerm is a pseudo-terminal: vmctl gets the tty as stdin and stdout, the test types into
// the master and reads what vmctl shows from it.
type ptyTerm struct {
	master, tty *os.File
	out         *lines
	pos         int // next() searches from here
	before      *unix.Termios
}

func newPty(t *testing.T) *ptyTerm {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 40, Cols: 200}); err != nil {
		t.Fatal(err)
	}
	p := &ptyTerm{master: master, tty: tty, out: newLines()}
	if p.before, err = unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(p.out, master) }()
	t.Cleanup(func() { master.Close(); tty.Close() })
	return p
}

func (p *ptyTerm) typeIn(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(p.master, s); err != nil {
		t.Fatalf("type %q: %v", s, err)
	}
}

// next waits for re in the output after the previous match and returns the match.
func (p *ptyTerm) next(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for {
		p.out.mu.Lock()
		text := p.out.b.String()
		ch := p.out.changed
		p.out.mu.Unlock()
		if loc := re.FindStringIndex(text[p.pos:]); loc != nil {
			m := text[p.pos+loc[0] : p.pos+loc[1]]
			p.pos += loc[1]
			return m
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("terminal never showed %s after:\n%q", re, text[p.pos:])
		}
	}
}

// termios is the tty's mode now.
func (p *ptyTerm) termios(t *testing.T) *unix.Termios {
	t.Helper()
	tio, err := unix.IoctlGetTermios(int(p.tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return tio
}

// restored fails unless the tty's mode is the one it had before vmctl ran.
func (p *ptyTerm) restored(t *testing.T) {
	t.Helper()
	now := p.termios(t)
	if now.Lflag != p.before.Lflag || now.Iflag != p.before.Iflag || now.Oflag != p.before.Oflag || now.Cflag != p.before.Cflag {
		t.Errorf("terminal not restored: lflag %#x iflag %#x oflag %#x, before %#x %#x %#x",
			now.Lflag, now.Iflag, now.Oflag, p.before.Lflag, p.before.Iflag, p.before.Oflag)
	}
}

// TestConsoleTerminal: on a terminal the console puts it in raw mode (no local echo, no line
// buffering, ^C is a byte for the guest, not a signal), Ctrl-] quits (exit 0) and the terminal
// is as it was.
func TestConsoleTerminal(t *testing.T) {
	f := newFakeAPI(t)
	p := newPty(t)
	if p.before.Lflag&unix.ICANON == 0 || p.before.Lflag&unix.ECHO == 0 {
		t.Fatalf("a new pty is not in cooked mode: lflag %#x", p.before.Lflag)
	}
	b := vmctlBG(t, newCLI(p.tty, p.tty, nil), "console", "vm1", "--kubeconfig", f.edit)
	b.stderr.wait(t, regexp.MustCompile(`(connected to the serial console; Ctrl-\] quits)`))
	if tio := p.termios(t); tio.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("terminal not raw during the session: lflag %#x", tio.Lflag)
	}
	// No newline: a cooked terminal would hold the bytes back, and echo them itself.
	p.typeIn(t, "ls\x03x")
	p.next(t, regexp.MustCompile(`ls\x03x`))
	p.typeIn(t, "!")
	p.next(t, regexp.MustCompile(`!`))
	if text := p.out.String(); strings.Count(text, "ls\x03x") != 1 {
		t.Errorf("typed bytes shown %d times (local echo?): %q", strings.Count(text, "ls\x03x"), text)
	}
	p.typeIn(t, "\x1d")
	if code := b.exited(t); code != exitOK {
		t.Errorf("after Ctrl-]: exit %d %s", code, b.stderr)
	}
	p.restored(t)
}

// TestQMPShell drives the interactive QMP shell on a terminal: Tab completes a command name
// (bare, and inside a JSON object) from query-commands, lists the candidates when the
// prefix is ambiguous, Up recalls the previous command, replies are pretty-printed, an error
// reply does not end the session, Ctrl-D does (exit 0) and restores the terminal; the history
// is kept in the file and a second session recalls it.
func TestQMPShell(t *testing.T) {
	f := newFakeAPI(t)
	hist := t.TempDir() + "/history"
	p := newPty(t)
	b := vmctlBG(t, newCLI(p.tty, p.tty, nil), "qmp", "vm1", "--kubeconfig", f.admin, "--history", hist)
	p.next(t, regexp.MustCompile(`QMP shell on vmi prod/vm1; 7 commands`))
	p.next(t, regexp.MustCompile(`qmp> `))
	if tio := p.termios(t); tio.Lflag&(unix.ICANON|unix.ECHO) != 0 {
		t.Errorf("terminal not raw in the shell: lflag %#x", tio.Lflag)
	}

	p.typeIn(t, "query-st\t")
	p.next(t, regexp.MustCompile(`query-status `))
	p.typeIn(t, "\r")
	p.next(t, regexp.MustCompile(`\{\r\n  "return": \{\r\n    "running": true,\r\n    "singlestep": false,\r\n    "status": "running"\r\n  \}\r\n\}\r\n`))
	p.next(t, regexp.MustCompile(`qmp> `))

	p.typeIn(t, "qu\t")
	p.next(t, regexp.MustCompile(`query-block  query-commands  query-name  query-status  quit`))
	p.typeIn(t, "\x15\x1b[A") // Ctrl-U clears the line, Up recalls query-status
	p.next(t, regexp.MustCompile(`query-status`))
	p.typeIn(t, "\r")
	p.next(t, regexp.MustCompile(`"status": "running"`))
	if n := f.Commands("prod", "vm1"); n != 3 {
		t.Errorf("%d commands ran, want 3 (query-commands, query-status twice)", n)
	}

	p.typeIn(t, `{"execute":"query-na`+"\t")
	p.next(t, regexp.MustCompile(`\{"execute":"query-name"`))
	p.typeIn(t, "}\r")
	p.next(t, regexp.MustCompile(`"name": "fake"`))

	p.typeIn(t, "bogus\r")
	p.next(t, regexp.MustCompile(`"class": "CommandNotFound"`))
	p.next(t, regexp.MustCompile(`qmp error CommandNotFound: The command bogus has not been found\r\n`))
	p.next(t, regexp.MustCompile(`qmp> `))
	p.typeIn(t, "stop\r")
	p.next(t, regexp.MustCompile(`"return": \{\}`))
	p.typeIn(t, "\x04") // Ctrl-D
	if code := b.exited(t); code != exitOK {
		t.Errorf("after Ctrl-D: exit %d %s", code, b.stderr)
	}
	p.restored(t)
	saved, err := os.ReadFile(hist)
	want := "query-status\n{\"execute\":\"query-name\"}\nbogus\nstop\n"
	if err != nil || string(saved) != want {
		t.Errorf("history file %q (%v), want %q", saved, err, want)
	}

	// A second session recalls the first one's history: Up three times is query-name's line.
	log := len(f.QMPLog("prod", "vm1"))
	b = vmctlBG(t, newCLI(p.tty, p.tty, nil), "qmp", "vm1", "--kubeconfig", f.admin, "--history", hist)
	p.next(t, regexp.MustCompile(`qmp> `))
	p.typeIn(t, "\x1b[A\x1b[A\x1b[A\r")
	p.next(t, regexp.MustCompile(`"name": "fake"`))
	p.typeIn(t, "exit\r")
	if code := b.exited(t); code != exitOK {
		t.Errorf("after exit: exit %d %s", code, b.stderr)
	}
	p.restored(t)
	if l := f.QMPLog("prod", "vm1"); len(l) != log+4 || l[log+2].Text != `{"execute":"query-name"}` {
		t.Errorf("second session's log: %+v", l[log:])
	}

	// quit ends QEMU and the server's session: the shell ends too, saying so (exit 1).
	b = vmctlBG(t, newCLI(p.tty, p.tty, nil), "qmp", "vm1", "--kubeconfig", f.admin, "--history", "")
	p.next(t, regexp.MustCompile(`qmp> `))
	p.typeIn(t, "quit\r")
	if code := b.exited(t); code != exitError || !strings.Contains(b.stderr.String(), "qmp session: closed by the server: "+subrestest.VMStopped) {
		t.Errorf("after quit: exit %d stderr %q", code, b.stderr)
	}
	p.restored(t)
}
