package launcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/testguest"
)

// vmctl runs the real vmctl binary against p's socket and returns its stdout.
func vmctl(t *testing.T, p *proc, args ...string) string {
	t.Helper()
	bin := vmctlBinary(t) // built on first use: not within the command's deadline (CI: a loaded machine's build took it all)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--launcher", p.paths.ReadySocket()}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vmctl %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// vmctlCommands drives vmctl's API subcommands against a running guest.
func vmctlCommands(t *testing.T, p *proc) {
	if out := vmctl(t, p, "status"); !strings.Contains(out, "state:   RUNNING") || !strings.Contains(out, "accel:   tcg") {
		t.Errorf("vmctl status:\n%s", out)
	}
	var st struct{ State string }
	if out := vmctl(t, p, "status", "--json"); json.Unmarshal([]byte(out), &st) != nil || st.State != "STATE_RUNNING" {
		t.Errorf("vmctl status --json:\n%s", out)
	}
	if out := vmctl(t, p, "pause"); strings.TrimSpace(out) != "PAUSED" {
		t.Errorf("vmctl pause: %q", out)
	}
	if out := vmctl(t, p, "qmp", `{"execute":"query-status"}`); !strings.Contains(out, `"status": "paused"`) {
		t.Errorf("vmctl qmp: %q", out)
	}
	if out := vmctl(t, p, "unpause"); strings.TrimSpace(out) != "RUNNING" {
		t.Errorf("vmctl unpause: %q", out)
	}
	out := vmctl(t, p, "qmp-log", "--tail", "30")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 30 || !strings.Contains(out, `"execute":"cont"`) {
		t.Errorf("vmctl qmp-log --tail 30:\n%s", out)
	}
	cmd := exec.Command(vmctlBinary(t), "--launcher", p.paths.ReadySocket(), "nonsense")
	if err := cmd.Run(); cmd.ProcessState.ExitCode() != 2 {
		t.Errorf("vmctl nonsense: %v, want exit status 2", err)
	}
}

// TestConsole: `vmctl console` shows the guest's serial output, types into it, and quits on
// Ctrl-]; logs/serial.log has the output too.
func TestConsole(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	bin := vmctlBinary(t) // before the deadline, as in vmctl
	ctx, cancel := context.WithTimeout(context.Background(), bootDeadline)
	defer cancel()
	r, err := p.client.Sync(ctx, guestSpec(t, "console"))
	if err != nil {
		t.Fatal(err)
	}
	p.qemu = int(r.GetDomain().GetPid())
	cmd := exec.CommandContext(ctx, bin, "--launcher", p.paths.ReadySocket(), "console")
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	con := testguest.NewConsole(bufio.NewReader(outPipe))
	if err := con.Wait(ctx, testguest.MarkerReady); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "echo typed-$((6*7))\n"); err != nil {
		t.Fatalf("typing into the console: %v", err)
	}
	if err := con.Wait(ctx, "typed-42"); err != nil {
		t.Fatalf("typing into the console: %v", err)
	}
	if _, err := in.Write([]byte{0x1d}); err != nil { // Ctrl-]
		t.Fatalf("typing Ctrl-]: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("vmctl console after Ctrl-]: %v", err)
	}
	log, err := os.ReadFile(p.paths.SerialLog())
	if err != nil || !strings.Contains(string(log), testguest.MarkerReady) || !strings.Contains(string(log), "typed-42") {
		t.Errorf("serial log lacks the session (%v):\n%s", err, log)
	}
}
