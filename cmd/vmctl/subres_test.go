package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"image/png"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/internal/subresclient/subrestest"
)

// TestGuestInfo: guestosinfo, userlist and fslist print the server's JSON (indented) or a
// table; the VMI is looked up in the context's namespace, -n overrides it, and each role and
// state gets its exit status.
func TestGuestInfo(t *testing.T) {
	f := newFakeAPI(t)
	r := vmctlIn(t, nil, "guestosinfo", "vm1", "--kubeconfig", f.view)
	var g map[string]any
	if r.code != exitOK || json.Unmarshal([]byte(r.stdout), &g) != nil || !strings.Contains(r.stdout, "\n  \"hostname\": \"vm1\"") {
		t.Fatalf("guestosinfo: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if os := g["os"].(map[string]any); os["kernelRelease"] != "6.1.0-28-cloud-amd64" {
		t.Errorf("guestosinfo os: %v", os)
	}
	r = vmctlIn(t, nil, "guestosinfo", "vm1", "--kubeconfig", f.view, "-o", "table")
	for _, want := range []string{"HOSTNAME:     vm1\n", "OS:           Debian GNU/Linux 12 (bookworm)\n", "KERNEL:       6.1.0-28-cloud-amd64\n", "AGENT:        7.2.0\n", "USERS:        0\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("guestosinfo -o table lacks %q:\n%s", want, r.stdout)
		}
	}
	r = vmctlIn(t, nil, "userlist", "vm1", "--kubeconfig", f.view, "-o", "table")
	want := "USER    DOMAIN  LOGIN (UTC)\nroot    -       2025-12-01 20:00:00\ndebian  LAB     -\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("userlist -o table: exit %d\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	r = vmctlIn(t, nil, "fslist", "vm1", "--kubeconfig", f.view, "-o", "table")
	want = "DISK  MOUNTPOINT  TYPE   USED      TOTAL   USE%\nvda1  /           ext4   512.0MiB  2.0GiB  25%\n-     /run        tmpfs  0B        0B      -\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("fslist -o table: exit %d\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	r = vmctlIn(t, nil, "userlist", "vm1", "--kubeconfig", f.view)
	if r.code != exitOK || !strings.Contains(r.stdout, `"userName": "debian"`) {
		t.Errorf("userlist: exit %d %q", r.code, r.stdout)
	}
	for _, tc := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"fslist", "vm1", "-n", "dev"}, exitNotFound, `virtualmachineinstances.vmlet.dev "vm1" not found`},
		{[]string{"fslist", "off"}, exitConflict, "vmi prod/off is not running"},
		{[]string{"fslist", "vm1", "-o", "yaml"}, exitUsage, `-o "yaml": want json or table`},
		{[]string{"fslist"}, exitUsage, "fslist takes one VMI NAME"},
	} {
		r := vmctlIn(t, nil, append(tc.args, "--kubeconfig", f.view)...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.err) {
			t.Errorf("%v: exit %d (want %d) stderr %q (want %q)", tc.args, r.code, tc.code, r.stderr, tc.err)
		}
	}
	// $KUBECONFIG and --context are kubectl's.
	t.Setenv("KUBECONFIG", f.view)
	if r := vmctlIn(t, nil, "fslist", "vm1"); r.code != exitOK {
		t.Errorf("with KUBECONFIG: exit %d %s", r.code, r.stderr)
	}
	if r := vmctlIn(t, nil, "fslist", "vm1", "--context", "nope"); r.code != exitError || !strings.Contains(r.stderr, `context "nope" does not exist`) {
		t.Errorf("--context nope: exit %d %s", r.code, r.stderr)
	}
}

// TestQMPCommand: one command as a name, a name with arguments, or JSON; the reply is
// pretty-printed; a QMP error reply exits 5 naming its class; the allow-list (403, exit 6)
// and a stopped VMI (409, exit 7) are told apart; every command is logged with its caller.
func TestQMPCommand(t *testing.T) {
	f := newFakeAPI(t)
	r := vmctlIn(t, nil, "qmp", "vm1", "query-status", "--kubeconfig", f.edit)
	want := "{\n  \"return\": {\n    \"running\": true,\n    \"singlestep\": false,\n    \"status\": \"running\"\n  }\n}\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("qmp query-status: exit %d stdout\n%s\nwant\n%s\nstderr %s", r.code, r.stdout, want, r.stderr)
	}
	r = vmctlIn(t, nil, "qmp", "vm1", `{"execute":"stop"}`, "--kubeconfig", f.admin)
	if r.code != exitOK || r.stdout != "{\n  \"return\": {}\n}\n" {
		t.Errorf("qmp stop: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := vmctlIn(t, nil, "qmp", "vm1", "query-status", "--kubeconfig", f.admin); !strings.Contains(r.stdout, `"status": "paused"`) {
		t.Errorf("after stop: %q", r.stdout)
	}
	r = vmctlIn(t, nil, "qmp", "vm1", `query-block {"flat": true}`, "--kubeconfig", f.admin)
	if r.code != exitRefused || !strings.Contains(r.stdout, `"class": "GenericError"`) || r.stderr != "vmctl: qmp error GenericError: the fake QEMU does not do query-block\n" {
		t.Errorf("qmp query-block (an error reply): exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	log := f.QMPLog("prod", "vm1")
	if len(log) != 8 || log[6].Text != `{"execute":"query-block","arguments":{"flat":true}}` || log[6].Caller != "alice" || log[0].Caller != "bob" {
		t.Errorf("QMP log: %+v", log)
	}
	for _, tc := range []struct {
		user, vmi, cmd string
		code           int
		err            string
	}{
		{f.edit, "vm1", "quit", exitForbidden, `qmp command "quit" is not allowed for user "bob"`},
		{f.view, "vm1", "query-status", exitForbidden, `User "carol" cannot POST resource "virtualmachineinstances/qmp"`},
		{f.admin, "off", "query-status", exitConflict, "vmi prod/off is not running"},
		{f.admin, "gone", "query-status", exitNotFound, `"gone" not found`},
		{f.admin, "vm1", `{"execute":`, exitUsage, "bad qmp command"},
		{f.admin, "vm1", `device_del nope`, exitUsage, "arguments of device_del are not a JSON object"},
	} {
		r := vmctlIn(t, nil, "qmp", tc.vmi, tc.cmd, "--kubeconfig", tc.user)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.err) {
			t.Errorf("qmp %s %s: exit %d (want %d) stderr %q (want %q)", tc.vmi, tc.cmd, r.code, tc.code, r.stderr, tc.err)
		}
	}
	if n := len(f.QMPLog("prod", "vm1")); n != 8 {
		t.Errorf("refused commands reached QEMU: %d log entries", n)
	}
}

// TestQMPScript: "vmctl qmp NAME" with a non-terminal stdin runs its lines through the
// websocket session and exits 5 when a reply was an error, after running the rest.
func TestQMPScript(t *testing.T) {
	f := newFakeAPI(t)
	in := strings.NewReader("# a comment\nquery-name\n\nnonsense\n{\"execute\":\"query-status\"}\n")
	r := vmctlIn(t, in, "qmp", "vm1", "--kubeconfig", f.admin)
	if r.code != exitRefused || strings.Count(r.stdout, "\"return\"") != 2 || !strings.Contains(r.stdout, `"name": "fake"`) ||
		r.stderr != "vmctl: nonsense: qmp error CommandNotFound: The command nonsense has not been found\nvmctl: 1 of 3 commands got a QMP error reply, the first: qmp error CommandNotFound: The command nonsense has not been found\n" {
		t.Errorf("exit %d stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	// query-commands for the completion list, then the three commands.
	if n := f.Commands("prod", "vm1"); n != 4 {
		t.Errorf("%d commands ran, want 4", n)
	}
	r = vmctlIn(t, strings.NewReader("stop\n"), "qmp", "vm1", "--kubeconfig", f.edit)
	if r.code != exitRefused || !strings.Contains(r.stdout, `"class": "Forbidden"`) {
		t.Errorf("stop as edit in a session: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = vmctlIn(t, strings.NewReader("query-name\n"), "qmp", "vm1", "--kubeconfig", f.view)
	if r.code != exitForbidden || !strings.Contains(r.stderr, "403") && !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("session as view: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestQMPLog: qmp-log prints the last --tail entries with their caller; -f prints new ones
// as they come until ^C (exit 0); the log needs admin.
func TestQMPLog(t *testing.T) {
	f := newFakeAPI(t)
	for _, cmd := range []string{"query-name", "query-status"} {
		if r := vmctlIn(t, nil, "qmp", "vm1", cmd, "--kubeconfig", f.edit); r.code != 0 {
			t.Fatal(r.stderr)
		}
	}
	r := vmctlIn(t, nil, "qmp-log", "vm1", "--tail", "2", "--kubeconfig", f.admin)
	line := regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{6} api   bob          (cmd  |reply) \{.*\}$`)
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(got) != 2 || !line.MatchString(got[0]) || !line.MatchString(got[1]) ||
		!strings.Contains(got[0], `cmd   {"execute":"query-status"}`) || !strings.Contains(got[1], `reply {"return":{`) {
		t.Errorf("qmp-log --tail 2: exit %d\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := vmctlIn(t, nil, "qmp-log", "vm1", "--kubeconfig", f.edit); r.code != exitForbidden {
		t.Errorf("qmp-log as edit: exit %d %s", r.code, r.stderr)
	}

	c := newCLI(nil, nil, nil)
	b := vmctlBG(t, c, "qmp-log", "vm1", "-f", "--tail", "1", "--kubeconfig", f.admin)
	b.stdout.wait(t, regexp.MustCompile(`(reply \{"return":\{"running")`))
	if r := vmctlIn(t, nil, "qmp", "vm1", "query-name", "--kubeconfig", f.admin); r.code != 0 {
		t.Fatal(r.stderr)
	}
	b.stdout.wait(t, regexp.MustCompile(`alice +(reply \{"return":\{"name":"fake"\}\})`))
	if code := b.stop(t); code != exitOK {
		t.Errorf("qmp-log -f after ^C: exit %d, stderr %s", code, b.stderr)
	}
}

// TestScreenshot: vnc screenshot writes the server's PNG and says its size; -o is required.
func TestScreenshot(t *testing.T) {
	f := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "s.png")
	r := vmctlIn(t, nil, "vnc", "screenshot", "vm1", "-o", out, "--kubeconfig", f.edit)
	if r.code != exitOK || r.stdout != out+": 64x48 PNG, "+strconv.Itoa(len(subrestest.Screenshot()))+" bytes\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.At(0, 0) == img.At(63, 0) {
		t.Errorf("screenshot: %v, pixels uniform", err)
	}
	if r := vmctlIn(t, nil, "vnc", "screenshot", "vm1", "--kubeconfig", f.edit); r.code != exitUsage {
		t.Errorf("without -o: exit %d", r.code)
	}
	if r := vmctlIn(t, nil, "vnc", "screenshot", "vm1", "-o", out, "--kubeconfig", f.view); r.code != exitForbidden {
		t.Errorf("as view: exit %d", r.code)
	}
}

// TestVNC: vnc listens on 127.0.0.1, prints the port and the viewer command, and relays a
// viewer's connection: the RFB greeting arrives and bytes go both ways.
func TestVNC(t *testing.T) {
	f := newFakeAPI(t)
	b := vmctlBG(t, newCLI(nil, nil, nil), "vnc", "vm1", "--kubeconfig", f.edit)
	port := b.stdout.wait(t, regexp.MustCompile(`VNC of vmi prod/vm1 on 127\.0\.0\.1:(\d+) `))
	b.stdout.wait(t, regexp.MustCompile(`(attach a viewer: vncviewer 127\.0\.0\.1::`+port+`   or: remote-viewer vnc://127\.0\.0\.1:`+port+`)\n`))
	conn, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	greet := make([]byte, len(subrestest.RFBGreeting))
	if _, err := io.ReadFull(conn, greet); err != nil || string(greet) != subrestest.RFBGreeting {
		t.Fatalf("greeting %q, %v", greet, err)
	}
	if _, err := conn.Write([]byte(subrestest.RFBGreeting)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(conn, greet); err != nil || string(greet) != subrestest.RFBGreeting {
		t.Fatalf("echo %q, %v", greet, err)
	}
	if code := b.stop(t); code != exitOK {
		t.Errorf("vnc after ^C: exit %d %s", code, b.stderr)
	}
}

// echoServer is a TCP service of the test's "guest": it answers each line with "echo: LINE".
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := io.WriteString(c, "echo: "+sc.Text()+"\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestPortForward: each local connection gets its own stream to the guest port, two at once;
// a guest port nothing listens on closes the connection and says why, and serving goes on.
func TestPortForward(t *testing.T) {
	f := newFakeAPI(t)
	f.With("prod", "vm1", func(v *subrestest.VMI) { v.Ports = map[int]string{80: echoServer(t)} })
	b := vmctlBG(t, newCLI(nil, nil, nil), "port-forward", "vm1", "0:80", "--kubeconfig", f.edit)
	addr := b.stdout.wait(t, regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) -> vmi prod/vm1 port 80`))
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns {
		msg := "hello " + strconv.Itoa(i)
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || got != "echo: "+msg+"\n" {
			t.Errorf("connection %d: %q, %v", i, got, err)
		}
	}
	if code := b.stop(t); code != exitOK {
		t.Errorf("port-forward after ^C: exit %d %s", code, b.stderr)
	}

	b = vmctlBG(t, newCLI(nil, nil, nil), "port-forward", "vm1", "0:81", "--kubeconfig", f.edit)
	addr = b.stdout.wait(t, regexp.MustCompile(`Forwarding from (127\.0\.0\.1:\d+) `))
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("connection to a closed guest port: read %d, %v, want EOF", n, err)
		}
		c.Close()
	}
	b.stderr.wait(t, regexp.MustCompile(`(guest port 81: connection refused(?s:.*)guest port 81: connection refused)`))
	b.stop(t)
	for _, bad := range []string{"x:80", "80:", "1:70000", "-1:80"} {
		if r := vmctlIn(t, nil, "port-forward", "vm1", bad, "--kubeconfig", f.edit); r.code != exitUsage {
			t.Errorf("port-forward %s: exit %d", bad, r.code)
		}
	}
}

// TestConsoleTakeover: bytes typed go to the console and its output comes back; a second
// client takes the console over and the first ends saying so (exit 1); Ctrl-] ends the
// second (exit 0).
func TestConsoleTakeover(t *testing.T) {
	f := newFakeAPI(t)
	inR, inW := io.Pipe()
	first := vmctlBG(t, newCLI(inR, nil, nil), "console", "vm1", "--kubeconfig", f.edit)
	if _, err := io.WriteString(inW, "uname -a\n"); err != nil {
		t.Fatal(err)
	}
	first.stdout.wait(t, regexp.MustCompile(`(uname -a\n)`))
	in2R, in2W := io.Pipe()
	second := vmctlBG(t, newCLI(in2R, nil, nil), "console", "vm1", "--kubeconfig", f.edit)
	if code := first.exited(t); code != exitError || !strings.Contains(first.stderr.String(), "vmctl: console closed by the server: "+subrestest.ConsoleTakenOver) {
		t.Errorf("first console: exit %d stderr %q", code, first.stderr)
	}
	if _, err := io.WriteString(in2W, "second\n\x1dignored"); err != nil {
		t.Fatal(err)
	}
	if code := second.exited(t); code != exitOK {
		t.Errorf("second console after Ctrl-]: exit %d stderr %q", code, second.stderr)
	}
	if strings.Contains(second.stdout.String(), "ignored") {
		t.Errorf("bytes after Ctrl-] were sent: %q", second.stdout)
	}
	if r := vmctlIn(t, nil, "console", "vm1", "--kubeconfig", f.view); r.code != exitForbidden {
		t.Errorf("console as view: exit %d %s", r.code, r.stderr)
	}
	if r := vmctlIn(t, nil, "console", "--kubeconfig", f.view); r.code != exitUsage || !strings.Contains(r.stderr, "console takes a VMI NAME (or --launcher PATH)") {
		t.Errorf("console without NAME: exit %d %s", r.code, r.stderr)
	}
}
