package network

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/qga"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// Deadlines for the guest tests: TCG boots take 3–7 s on two busy cores; these are upper
// bounds only, every wait ends on its condition.
const (
	bootTimeout = 120 * time.Second
	opTimeout   = 60 * time.Second
)

// guestVM is the test guest started by the project's QEMU driver with its NIC on a binding's
// tap.
type guestVM struct {
	*qemu.VM
	console *testguest.Console
	agent   *qga.Agent
	logs    *logbuf.Buffer
}

// startGuest opens the tap queues of interface iface of a, starts QEMU with them (getfd over
// SCM_RIGHTS) and the serial console and guest agent on sockets, and resumes the guest once
// the console is attached. t.Cleanup kills QEMU and logs its output on failure.
func startGuest(t testing.TB, a *Attachment, iface string) *guestVM {
	t.Helper()
	bin := prereq.QEMU(t)
	files := testguest.Assets(t)
	dir, err := os.MkdirTemp("/tmp", "vn") // short: unix socket paths
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ip, ok := a.iface(iface)
	if !ok {
		t.Fatalf("no interface %s", iface)
	}
	fds, err := a.OpenTaps(iface)
	must(t, err)
	spec := &qemu.Spec{
		Name:        "nettest-" + strings.ReplaceAll(strings.ToLower(filepath.Base(t.Name())), "_", "-"),
		MemoryMiB:   256,
		Boot:        qemu.Boot{Kernel: files.Kernel, Initrd: files.Initrd, Cmdline: testguest.BaseCmdline},
		Serial:      &qemu.Serial{Socket: filepath.Join(dir, "serial.sock")},
		Agent:       &qemu.Agent{Socket: filepath.Join(dir, "qga.sock")},
		NICs:        []qemu.NIC{{ID: "net0", MAC: ip.MAC.String(), TapFDs: fds}},
		StartPaused: true,
	}
	logs := &logbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm, err := qemu.Start(ctx, spec, qemu.StartOptions{
		Binary: bin, QMPSocket: filepath.Join(dir, "qmp.sock"), Stderr: logs,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	for _, f := range fds {
		f.Close() // QEMU has its own copies now
	}
	if err != nil {
		t.Fatalf("start qemu: %v\n%s", err, logs.String())
	}
	g := &guestVM{VM: vm, logs: logs}
	t.Cleanup(func() {
		kctx, kcancel := context.WithTimeout(context.Background(), opTimeout)
		defer kcancel()
		if _, exited := vm.ExitInfo(); !exited {
			if err := vm.Kill(kctx); err != nil {
				t.Errorf("kill qemu: %v", err)
			}
		}
		if t.Failed() && g.console != nil {
			t.Logf("qemu and driver log:\n%s\nconsole:\n%s", logs.String(), g.console.String())
		}
	})
	conn, err := net.Dial("unix", spec.Serial.Socket)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	g.console = testguest.NewConsole(conn)
	g.agent, err = qga.Dial(ctx, spec.Agent.Socket, qga.Options{})
	must(t, err)
	t.Cleanup(func() { g.agent.Close() })
	must(t, vm.Resume(ctx))
	t.Logf("guest started under %s (%s)", vm.Info().Accel, vm.Info().AccelReason)
	return g
}

// waitIP waits for the guest's "VMLET-IP eth0 <addr>" console marker and returns addr.
func (g *guestVM) waitIP(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	line, _, err := g.console.WaitLine(ctx, 0, testguest.MarkerIP+" eth0 ")
	if err != nil {
		t.Fatalf("guest never configured eth0: %v", err)
	}
	return strings.TrimSpace(strings.TrimPrefix(line[strings.Index(line, testguest.MarkerIP):], testguest.MarkerIP+" eth0 "))
}

// waitIP6 waits for the guest's "VMLET-IP6 eth0 <addr>" console marker (its DHCPv6 client
// configured the address) and returns addr.
func (g *guestVM) waitIP6(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	prefix := testguest.MarkerIP6 + " eth0 "
	line, _, err := g.console.WaitLine(ctx, 0, prefix)
	if err != nil {
		t.Fatalf("guest never configured eth0 by DHCPv6: %v", err)
	}
	return strings.TrimSpace(line[strings.Index(line, prefix)+len(prefix):])
}

// sh runs a shell command in the guest through the guest agent and returns its stdout.
func (g *guestVM) sh(t testing.TB, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	st, err := g.agent.Run(ctx, "/bin/sh", "-c", cmd)
	if err != nil {
		t.Fatalf("guest %q: %v", cmd, err)
	}
	if st.ExitCode != 0 || st.Signal != 0 {
		t.Fatalf("guest %q: exit %d signal %d, stderr %q", cmd, st.ExitCode, st.Signal, st.Stderr)
	}
	return string(st.Stdout)
}

// serveHTTP starts busybox httpd on port in the guest with a CGI that answers
// "hello <client address>", so a client learns which source address the guest saw.
func (g *guestVM) serveHTTP(t testing.TB, port int) {
	t.Helper()
	g.sh(t, fmt.Sprintf(`mkdir -p /www/cgi-bin && printf '#!/bin/sh\necho "Content-Type: text/plain"\necho\necho "hello $REMOTE_ADDR"\n' >/www/cgi-bin/ip &&
chmod +x /www/cgi-bin/ip && httpd -p %d -h /www </dev/null >/dev/null 2>&1`, port))
}

// httpHello asks the guest's CGI through addr from netns ns and returns its answer.
func httpHello(ns, addr string) (string, error) {
	c, err := dialIn(ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(opTimeout)); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("GET /cgi-bin/ip HTTP/1.0\r\n\r\n")); err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(c); err != nil {
		return "", err
	}
	_, body, ok := strings.Cut(strings.ReplaceAll(b.String(), "\r\n", "\n"), "\n\n")
	if !ok {
		return "", fmt.Errorf("no http body in %q", b.String())
	}
	// busybox httpd listens on an IPv6 socket and shows clients as [::ffff:a.b.c.d] or [v6].
	return strings.NewReplacer("[::ffff:", "", "[", "", "]", "").Replace(strings.TrimSpace(body)), nil
}
