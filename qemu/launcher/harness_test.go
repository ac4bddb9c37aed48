package launcher_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/logbuf"
	"github.com/vmlet/vmlet/test/prereq"
)

// binDir holds the binaries built once per test process (TestMain removes it).
var (
	binDir   string
	binOnce  sync.Once
	binError error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// launcherBinary builds cmd/vmlet-launcher once per test process.
func launcherBinary(t testing.TB) string { return buildBinary(t, "vmlet-launcher") }

// vmctlBinary builds cmd/vmctl once per test process.
func vmctlBinary(t testing.TB) string { return buildBinary(t, "vmctl") }

var built = map[string]*builtBinary{"vmlet-launcher": {}, "vmctl": {}}

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// buildBinary builds ./cmd/<name> into binDir (created once, world-readable so that
// unprivileged launchers can run; TestMain removes it).
func buildBinary(t testing.TB, name string) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binError = os.MkdirTemp("", "vmlet-launcher-bin-")
		if binError == nil {
			binError = os.Chmod(binDir, 0o755)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	b := built[name]
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// CGO_ENABLED=0: the launcher needs no libc (no DNS, no user lookups); a static binary
		// saves ≈1.3 MiB RSS per launcher.
		// VMLET_TEST_RACE=1 builds them with the race detector instead (needs cgo).
		args := []string{"build", "-o", b.path}
		env := append(os.Environ(), "CGO_ENABLED=0")
		if os.Getenv("VMLET_TEST_RACE") == "1" {
			args, env = append(args, "-race"), append(os.Environ(), "CGO_ENABLED=1")
		}
		cmd := exec.CommandContext(ctx, "go", append(args, "github.com/vmlet/vmlet/cmd/"+name)...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %w\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// proc is a running vmlet-launcher process started by startLauncher.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	runDir string
	paths  launcher.Paths
	stderr *logbuf.Buffer
	done   chan struct{} // closed when the process was reaped
	state  *os.ProcessState
	client *launcher.Client
	qemu   int // QEMU's pid once a domain started (recorded by the tests)
}

type launchOpts struct {
	grace  time.Duration
	args   []string
	runDir string   // reuse this run dir (default: a fresh one)
	env    []string // added to the launcher's environment
	uid    int      // run the launcher as this user (and group) when non-zero
}

// startLauncher starts the real launcher binary on a fresh run dir, waits (on inotify, not
// by polling) until its ready socket appears, and dials it. Cleanup kills whatever still
// runs and asserts that nothing is left behind: no launcher, no QEMU, no socket.
func startLauncher(t testing.TB, o launchOpts) *proc {
	t.Helper()
	prereq.Root(t)
	bin := launcherBinary(t)
	runDir, err := o.runDir, error(nil)
	if runDir == "" {
		runDir, err = os.MkdirTemp("", "vl-") // short: socket paths must fit 107 bytes
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &proc{t: t, runDir: runDir, paths: launcher.Paths{Root: runDir}, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	args := []string{"--run-dir", runDir, "--log-level", "debug", "--agent-ping-interval", "1s", "--agent-retry-max", "1s"}
	if o.grace > 0 {
		args = append(args, "--grace-period", o.grace.String())
	}
	p.cmd = exec.Command(bin, append(args, o.args...)...)
	p.cmd.Stderr = p.stderr
	p.cmd.Env = append(os.Environ(), o.env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if o.uid != 0 {
		p.cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.uid)}
	}
	w, err := newDirWatch(runDir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait() // a non-zero exit is an error here; the exit code is read from p.state
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(p.cleanup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.waitFor(ctx, launcher.ReadySocket, p.done); err != nil {
		t.Fatalf("wait for launcher ready: %v\nstderr:\n%s", err, p.stderr.String())
	}
	if p.client, err = launcher.Dial(ctx, p.paths.ReadySocket()); err != nil {
		t.Fatalf("dial launcher: %v", err)
	}
	return p
}

// wait waits for the launcher to exit and returns its exit code.
func (p *proc) wait(ctx context.Context) (int, error) {
	select {
	case <-p.done:
		return p.state.ExitCode(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("wait for launcher exit: %w\nstderr:\n%s", ctx.Err(), p.stderr.String())
	}
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal launcher: %v", err)
	}
}

// cleanup stops a launcher that still runs the way the agent would (Kill RPC with a domain,
// SIGTERM without), and asserts nothing is left behind: no launcher, no QEMU, no socket.
// SIGKILL is only the last resort (it leaves sockets, which the next launcher removes).
func (p *proc) cleanup() {
	t := p.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case <-p.done:
	default:
		if d, err := p.client.GetDomain(ctx); err == nil && d.GetState() != pb.State_STATE_NO_DOMAIN {
			_ = p.client.Kill(ctx) // best effort: p.wait below checks that the launcher exits
		} else {
			_ = p.cmd.Process.Signal(syscall.SIGTERM) // best effort, as above
		}
		if _, err := p.wait(ctx); err != nil {
			t.Errorf("launcher did not exit: %v", err)
			_ = p.cmd.Process.Kill() // last resort; the failure is reported already
			<-p.done
		}
	}
	if p.client != nil {
		p.client.Close()
	}
	if p.qemu > 0 {
		if err := waitPidGone(ctx, p.qemu); err != nil {
			t.Errorf("qemu outlived the launcher: %v", err)
			_ = syscall.Kill(p.qemu, syscall.SIGKILL) // last resort; the failure is reported already
		}
	}
	if socks := findSockets(t, p.runDir); len(socks) > 0 {
		t.Errorf("launcher left sockets behind: %v", socks)
	}
	if strings.Contains(p.stderr.String(), "DATA RACE") { // VMLET_TEST_RACE=1 builds
		t.Errorf("the race detector fired in the launcher")
	}
	if t.Failed() {
		t.Logf("launcher stderr:\n%s", p.stderr.String())
		if b, err := os.ReadFile(p.paths.SerialLog()); err == nil {
			t.Logf("serial log:\n%s", b)
		}
	}
	os.RemoveAll(p.runDir)
}

// assertClean checks, after the launcher exited, that no socket and no QEMU is left.
func (p *proc) assertClean(t testing.TB) {
	t.Helper()
	if socks := findSockets(t, p.runDir); len(socks) > 0 {
		t.Errorf("sockets left behind: %v", socks)
	}
	if p.qemu > 0 && syscall.Kill(p.qemu, 0) == nil {
		t.Errorf("qemu pid %d still exists after the launcher exited", p.qemu)
	}
}

func findSockets(t testing.TB, dir string) []string {
	var out []string
	// The callback never fails, so WalkDir does not either: an unreadable entry holds no socket.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// waitPidGone waits until pid has exited, with a pidfd (readable once the process is gone).
func waitPidGone(ctx context.Context, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	for {
		ms := 1000
		if dl, ok := ctx.Deadline(); ok {
			ms = int(min(time.Until(dl), time.Second).Milliseconds())
		}
		if ms <= 0 {
			return fmt.Errorf("pid %d still runs: %w", pid, context.DeadlineExceeded)
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("pid %d still runs: %w", pid, ctx.Err())
		}
	}
}

// dirWatch is an inotify watch on one folder: waitFor returns once a name exists in it.
type dirWatch struct {
	f   *os.File
	dir string
}

func newDirWatch(dir string) (*dirWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify init: %w", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("inotify watch %s: %w", dir, err)
	}
	return &dirWatch{f: os.NewFile(uintptr(fd), "inotify"), dir: dir}, nil
}

func (w *dirWatch) close() { w.f.Close() }

// waitFor waits until dir/name exists, ctx ends, or abort is closed.
func (w *dirWatch) waitFor(ctx context.Context, name string, abort <-chan struct{}) error {
	// SetReadDeadline wakes the Read below; it cannot fail on the inotify fd (IN_NONBLOCK, so pollable).
	stop := context.AfterFunc(ctx, func() { _ = w.f.SetReadDeadline(time.Now()) })
	defer stop()
	go func() {
		select {
		case <-abort:
			_ = w.f.SetReadDeadline(time.Now()) // as above
		case <-ctx.Done():
		}
	}()
	buf := make([]byte, 4096)
	for {
		if _, err := os.Lstat(filepath.Join(w.dir, name)); err == nil {
			return nil
		}
		if _, err := w.f.Read(buf); err != nil {
			select {
			case <-abort:
				return fmt.Errorf("wait for %s: process exited", name)
			default:
			}
			if ctx.Err() != nil {
				return fmt.Errorf("wait for %s: %w", name, ctx.Err())
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("read inotify: %w", err)
			}
		}
	}
}

// hostQEMUVersion is the "major.minor.micro" of the emulator on PATH, as `--version` says it.
func hostQEMUVersion(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := qemu.Version(ctx, qemu.DefaultBinary)
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}
