package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/internal/subresclient/subrestest"
	"github.com/vmlet/vmlet/test/prereq"
)

// bannerServer plays the guest's sshd up to the protocol banners: it sends its own, records
// the client's and hangs up (so a real ssh gets that far, then fails with 255).
func bannerServer(t *testing.T) (addr string, banners <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ch := make(chan string, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("SSH-2.0-vmlet_test\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			ch <- strings.TrimSpace(line)
			c.Close()
		}
	}()
	return l.Addr().String(), ch
}

// TestSSH runs the system's ssh (through a wrapper that records its arguments) against the
// port-forward to the guest's port 22: ssh reaches the guest's sshd (its banner arrives
// there), gets USER@NAME's user, the per-VMI HostKeyAlias and the arguments after --, and
// ssh's exit status (255: the fake sshd hangs up) is vmctl's, with no message of vmctl's own.
func TestSSH(t *testing.T) {
	prereq.Short(t, "an OpenSSH client")
	real, err := exec.LookPath("ssh")
	if err != nil {
		prereq.Missing(t, "no ssh on PATH (apt-get install openssh-client)")
	}
	f := newFakeAPI(t)
	addr, banners := bannerServer(t)
	f.With("prod", "vm1", func(v *subrestest.VMI) { v.Ports = map[int]string{22: addr} })
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	wrapper := filepath.Join(dir, "ssh")
	script := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c := newCLI(nil, nil, nil)
	c.lookPath = func(string) (string, error) { return wrapper, nil }
	b := vmctlBG(t, c, "ssh", "debian@vm1", "--kubeconfig", f.edit, "--",
		"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no", "-F", "/dev/null", "true")
	if code := b.exited(t); code != 255 {
		t.Errorf("exit %d, want ssh's 255; stderr:\n%s", code, b.stderr)
	}
	if got := <-banners; !strings.HasPrefix(got, "SSH-2.0-OpenSSH") {
		t.Errorf("the guest's sshd got %q, want an OpenSSH banner", got)
	}
	if strings.Contains(b.stderr.String(), "vmctl:") {
		t.Errorf("vmctl added a message to ssh's: %s", b.stderr)
	}
	argv, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(argv))
	want := []string{"-p", "PORT", "-o", "HostKeyAlias=vmi.vm1.prod", "-l", "debian", "127.0.0.1",
		"-o", "BatchMode=yes", "-o", "UserKnownHostsFile=/dev/null", "-o", "StrictHostKeyChecking=no", "-F", "/dev/null", "true"}
	if len(got) == len(want) {
		want[1] = got[1]
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ssh argv:\n%q\nwant\n%q", got, want)
	}
	if r := vmctlIn(t, nil, "ssh", "vm1", "extra", "--kubeconfig", f.edit); r.code != exitUsage {
		t.Errorf("ssh vm1 extra (no --): exit %d", r.code)
	}
}
