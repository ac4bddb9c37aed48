package launcher_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestStartupWithoutDomain: the launcher prepares its run dir, serves on the ready name only
// (0600), answers with no domain, reports failed domain starts by step (and undoes them), and
// exits 0 on SIGTERM leaving no socket.
func TestStartupWithoutDomain(t *testing.T) {
	p := startLauncher(t, launchOpts{})
	st, err := os.Stat(p.paths.ReadySocket())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Errorf("ready socket mode %v, want a 0600 socket", st.Mode())
	}
	if _, err := os.Stat(p.paths.StartingSocket()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("starting socket still exists after ready: %v", err)
	}
	for _, d := range p.paths.Dirs() {
		st, err := os.Stat(d)
		if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("dir %s: %v %v, want a 0700 folder", d, st.Mode(), err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dom, err := p.client.GetDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dom.GetState() != pb.State_STATE_NO_DOMAIN {
		t.Errorf("state %s, want NO_DOMAIN", dom.GetState())
	}
	if _, err := p.client.Pause(ctx); !errors.Is(err, launcher.ErrNoDomain) {
		t.Errorf("Pause without a domain: %v, want ErrNoDomain", err)
	}
	var re *launcher.RemoteError
	if _, err := p.client.Pause(ctx); !errors.As(err, &re) || re.Code != "FailedPrecondition" || re.Reason != "NO_DOMAIN" {
		t.Errorf("Pause error %#v, want FailedPrecondition/NO_DOMAIN", err)
	}
	if _, err := p.client.Sync(ctx, &pb.DomainSpec{Name: "bad name!"}); !errors.Is(err, launcher.ErrInvalidSpec) {
		t.Errorf("Sync with an invalid spec: %v, want ErrInvalidSpec", err)
	}
	// A start that fails is reported by step, undone, and leaves the launcher usable.
	spec := guestSpec(t, "nokernel")
	spec.Boot.Kernel = "/nonexistent/vmlinuz"
	_, err = p.client.Sync(ctx, spec)
	if !errors.As(err, &re) || re.Metadata["step"] != "start-qemu" {
		t.Errorf("Sync with a missing kernel: %v, want a failure in step start-qemu", err)
	}
	spec = guestSpec(t, "notap")
	spec.Nics = []*pb.NIC{{Id: "net0", Mac: "52:54:00:00:00:01", TapName: "no-such-tap"}}
	_, err = p.client.Sync(ctx, spec)
	if !errors.Is(err, launcher.ErrTapNotFound) || !errors.As(err, &re) || re.Metadata["step"] != "open-taps" {
		t.Errorf("Sync with a missing tap: %v, want ErrTapNotFound in step open-taps", err)
	}
	if d, err := p.client.GetDomain(ctx); err != nil || d.GetState() != pb.State_STATE_NO_DOMAIN {
		t.Errorf("after failed starts: %v %v, want NO_DOMAIN", d.GetState(), err)
	}
	p.signal(syscall.SIGTERM)
	code, err := p.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code != launcher.ExitOK {
		t.Errorf("exit code %d, want %d", code, launcher.ExitOK)
	}
	p.assertClean(t)
}

// TestStartupFailureNamesStep: a run dir whose sockets folder cannot be created fails the
// "prepare-dirs" step, which the launcher reports by name, with ExitError.
func TestStartupFailureNamesStep(t *testing.T) {
	prereq.Root(t)
	bin := launcherBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "logs"), []byte("a file where a folder belongs"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--run-dir", dir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != launcher.ExitError {
		t.Fatalf("exit %v, want status %d\n%s", err, launcher.ExitError, out)
	}
	if !strings.Contains(string(out), "step=prepare-dirs") {
		t.Errorf("output does not name the failed step prepare-dirs:\n%s", out)
	}
	if socks := findSockets(t, dir); len(socks) > 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
	// Usage errors are distinct.
	out, err = exec.CommandContext(ctx, bin).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != launcher.ExitUsage {
		t.Errorf("no flags: %v, want status %d\n%s", err, launcher.ExitUsage, out)
	}
}
