package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/procstatus"
)

const fakeEnv = "VMLET_PROCESS_TEST_FAKE_LAUNCHER"

// TestMain lets the test binary act as a minimal launcher: it binds the starting socket,
// renames it to the ready name, and exits 0 on SIGTERM. It stands in for vmlet-launcher, whose
// own tests run the real thing; here the seam under test is the runtime.
func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fakeLauncher())
	}
	os.Exit(m.Run())
}

func fakeLauncher() int {
	if msg := os.Getenv(fakeFailEnv); msg != "" {
		// A launcher that cannot start its domain: it says why on stderr (its log) and fails.
		fmt.Fprintf(os.Stderr, "level=INFO msg=starting\n\nlevel=ERROR msg=%q\n", msg)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	l, err := net.Listen("unix", StartingSocket)
	if err != nil {
		return 3
	}
	if err := os.Rename(StartingSocket, ReadySocket); err != nil {
		return 4
	}
	<-sigs
	_ = l.Close()
	return 0
}

// fakeFailEnv makes the fake launcher fail at once, logging its value.
const fakeFailEnv = "VMLET_FAKE_LAUNCHER_FAIL"

// TestLauncherFailureDetail: a launcher that fails by itself (status 1, no end record) is
// reported with the last lines of its log, which go with its run folder.
func TestLauncherFailureDetail(t *testing.T) {
	r, exits := newRuntime(t)
	t.Setenv(fakeFailEnv, "start domain: qemu: cannot open /dev/kvm")
	id := "0f4c6a2e-1111-4e7e-9d51-00000000000f"
	if _, err := r.Ensure(context.Background(), spec(id)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exits:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit reported")
	}
	end := waitState(t, r, id, func(s State) bool { return s.Exited != nil })
	if want := "level=INFO msg=starting\nlevel=ERROR msg=\"start domain: qemu: cannot open /dev/kvm\""; end.Exited.Code != 1 || end.Exited.Detail != want {
		t.Errorf("exit %+v, want code 1 and detail %q", end.Exited, want)
	}
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}

// TestLogTail: the last lines of a log, empty ones skipped, a line cut by the read window
// dropped; nothing through a symlink.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "launcher.log")
	long := strings.Repeat("x", maxRecordBytes)
	if err := os.WriteFile(p, []byte(long+"\na\n\nb\nc\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := logTail(p, 3); got != "a\nb\nc" {
		t.Errorf("logTail = %q", got)
	}
	if got := logTail(p, 10); got != "a\nb\nc" {
		t.Errorf("logTail of more lines than the window holds = %q", got)
	}
	link := filepath.Join(dir, "link.log")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if got := logTail(link, 3); got != "" {
		t.Errorf("logTail through a symlink = %q", got)
	}
	if got := logTail(filepath.Join(dir, "missing"), 3); got != "" {
		t.Errorf("logTail of a missing file = %q", got)
	}
}

func newRuntime(t *testing.T) (*Runtime, chan string) {
	t.Helper()
	prereq.Root(t)
	mnt, err := devices.FindCgroup2Mount()
	if err != nil {
		prereq.Missing(t, "cgroup2: "+err.Error())
	}
	parent, err := os.MkdirTemp(mnt, "vmlet-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(parent) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exits := make(chan string, 4)
	t.Setenv(fakeEnv, "1")
	return &Runtime{Binary: self, RunRoot: t.TempDir(), CgroupParent: parent, OnExit: func(id string) { exits <- id }}, exits
}

func spec(id string) Spec {
	return Spec{ID: id, Name: "test", Rules: devices.Baseline(devices.BaselineOptions{})}
}

// waitState polls the run folder (file state, no event source) until cond holds or the deadline.
func waitState(t *testing.T, r *Runtime, id string, cond func(State) bool) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := r.State(id)
		if err == nil && cond(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("launcher %s: condition not reached: last state %+v, err %v", id, st, err)
		case <-tick.C:
		}
	}
}

func TestEnsureStopRemove(t *testing.T) {
	r, exits := newRuntime(t)
	id := "0f4c6a2e-1111-4e7e-9d51-000000000001"
	st, err := r.Ensure(context.Background(), spec(id))
	if err != nil {
		t.Fatal(err)
	}
	ready := waitState(t, r, id, func(s State) bool { return s.Ready })
	if ready.Pid != st.Pid {
		t.Fatalf("pid changed: %d -> %d", st.Pid, ready.Pid)
	}
	again, err := r.Ensure(context.Background(), spec(id))
	if err != nil || again.Pid != st.Pid {
		t.Fatalf("Ensure not idempotent: %+v %v", again, err)
	}
	// The launcher runs inside its own cgroup.
	procs, err := (&devices.Cgroup{Path: r.cgroupPath(id)}).Procs()
	if err != nil || len(procs) != 1 || procs[0] != st.Pid {
		t.Fatalf("cgroup procs = %v, %v; want [%d]", procs, err, st.Pid)
	}

	if err := r.Stop(id); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-exits:
		if got != id {
			t.Fatalf("OnExit(%s), want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit reported")
	}
	end := waitState(t, r, id, func(s State) bool { return s.Exited != nil })
	if !end.Exited.Known || end.Exited.Code != 0 {
		t.Fatalf("exit = %+v, want known code 0", end.Exited)
	}
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}

// TestListOnlyLaunchers: List names the run root's launcher folders (with a launcher's log),
// not another folder there, whatever its name (a Kubernetes node's /run/vmlet/launchers), nor
// a file: a node shutdown removes what List names.
func TestListOnlyLaunchers(t *testing.T) {
	r := &Runtime{RunRoot: t.TempDir()}
	for _, d := range []string{"0f4c6a2e-1111-4e7e-9d51-000000000009", "launchers", "Not-An-Id", "linked"} {
		if err := os.Mkdir(filepath.Join(r.RunRoot, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"0f4c6a2e-1111-4e7e-9d51-000000000009/" + logFile, "Not-An-Id/" + logFile, "launchers/x/" + logFile, "loose"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(r.RunRoot, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.RunRoot, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(r.RunRoot, "linked", logFile)); err != nil {
		t.Fatal(err)
	}
	ids, err := r.List()
	if err != nil || len(ids) != 1 || ids[0] != "0f4c6a2e-1111-4e7e-9d51-000000000009" {
		t.Fatalf("List = %q, %v; want only the launcher's folder", ids, err)
	}
}

// TestAdoptAfterRestart: a new Runtime (an agent restarted) finds the running launcher, and a
// launcher killed while nobody watched is reported as an unobserved exit.
func TestAdoptAfterRestart(t *testing.T) {
	r, _ := newRuntime(t)
	id := "0f4c6a2e-1111-4e7e-9d51-000000000002"
	st, err := r.Ensure(context.Background(), spec(id))
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, r, id, func(s State) bool { return s.Ready })

	adoptedExit := make(chan string, 1)
	restarted := &Runtime{Binary: r.Binary, RunRoot: r.RunRoot, CgroupParent: r.CgroupParent,
		OnExit: func(id string) { adoptedExit <- id }}
	ids, err := restarted.List()
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("List = %v, %v", ids, err)
	}
	adopted, err := restarted.Ensure(context.Background(), spec(id))
	if err != nil || adopted.Pid != st.Pid || !adopted.Ready || adopted.Exited != nil {
		t.Fatalf("adopted = %+v, %v; want the running pid %d", adopted, err, st.Pid)
	}

	// Simulate "killed while the agent was down": the first runtime's reaper writes the exit
	// file, so remove it to look at what a restarted agent would see without it.
	if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select { // the restarted runtime learns of the exit through its pidfd, without polling
	case got := <-adoptedExit:
		if got != id {
			t.Fatalf("OnExit(%s), want %s", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("adopted launcher's exit not reported")
	}
	waitState(t, r, id, func(s State) bool { return s.Exited != nil })
	if err := os.Remove(filepath.Join(r.Dir(id), exitFile)); err != nil {
		t.Fatal(err)
	}
	gone, err := restarted.State(id)
	if err != nil || gone.Exited == nil || gone.Exited.Known {
		t.Fatalf("state after unobserved kill = %+v, %v; want an unknown exit", gone, err)
	}
	if err := restarted.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}

func assertGone(t *testing.T, r *Runtime, id string) {
	t.Helper()
	if _, err := os.Stat(r.Dir(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run dir left behind: %v", err)
	}
	if _, err := os.Stat(r.cgroupPath(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup left behind: %v", err)
	}
	if _, err := r.State(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("State after Remove: %v, want ErrNotFound", err)
	}
}

// TestUnprivilegedLauncher: with a User, the launcher runs as that uid/gid, with no
// supplementary group, every capability set empty (bounding and ambient included) and
// no_new_privs; it owns its run folder (0700), and the agent keeps its own privileges.
func TestUnprivilegedLauncher(t *testing.T) {
	r, _ := newRuntime(t)
	// The test binary stands in for the launcher; the user must be able to execute it.
	tmp := t.TempDir()
	if err := os.Chmod(filepath.Dir(tmp), 0o711); err != nil { // t.TempDir's parent is 0700
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "fake-launcher")
	copyExecutable(t, r.Binary, bin)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	r.Binary = bin
	r.User = User{UID: DefaultUID, GID: DefaultGID}
	id := "0f4c6a2e-1111-4e7e-9d51-000000000003"
	st, err := r.Ensure(context.Background(), spec(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Remove(context.Background(), id) })
	waitState(t, r, id, func(s State) bool { return s.Ready })
	ps, err := procstatus.Read(st.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range ps.Unprivileged(DefaultUID, DefaultGID) {
		t.Errorf("launcher: %s", bad)
	}
	fi, err := os.Stat(r.Dir(id))
	if err != nil {
		t.Fatal(err)
	}
	if sys := fi.Sys().(*syscall.Stat_t); sys.Uid != DefaultUID || sys.Gid != DefaultGID || fi.Mode().Perm() != 0o700 {
		t.Errorf("run dir %v owned by %d:%d, want 107:107 0700", fi.Mode(), sys.Uid, sys.Gid)
	}
	self, err := procstatus.Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if self.CapEff == 0 || self.NoNewPrivs != 0 {
		t.Errorf("the agent lost its privileges: CapEff %x NoNewPrivs %d", self.CapEff, self.NoNewPrivs)
	}
	if err := r.Stop(id); err != nil {
		t.Fatal(err)
	}
	end := waitState(t, r, id, func(s State) bool { return s.Exited != nil })
	if end.Exited.Code != 0 {
		t.Fatalf("exit = %+v, want 0", end.Exited)
	}
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestStartAfterKilledMidStart: an agent killed after making a launcher's cgroup but before
// recording the launcher leaves the cgroup (maybe with a process in it); the next Ensure
// removes it, killing what ran there, and starts the launcher (it failed with "file exists").
func TestStartAfterKilledMidStart(t *testing.T) {
	r, _ := newRuntime(t)
	id := "0f4c6a2e-1111-4e7e-9d51-000000000004"
	left, err := devices.NewCgroup(r.CgroupParent, "vmlet-"+id)
	if err != nil {
		t.Fatal(err)
	}
	stray := exec.Command("sleep", "300")
	if err := left.Start(stray); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- stray.Wait() }()

	st, err := r.Ensure(context.Background(), spec(id))
	if err != nil {
		t.Fatalf("Ensure over a leftover cgroup: %v", err)
	}
	select {
	case err := <-waited:
		if err == nil {
			t.Error("the process in the leftover cgroup exited 0, want killed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the process in the leftover cgroup still runs")
	}
	waitState(t, r, id, func(s State) bool { return s.Ready })
	procs, err := (&devices.Cgroup{Path: r.cgroupPath(id)}).Procs()
	if err != nil || len(procs) != 1 || procs[0] != st.Pid {
		t.Fatalf("cgroup procs = %v, %v; want only the launcher %d", procs, err, st.Pid)
	}
	if err := r.Stop(id); err != nil {
		t.Fatal(err)
	}
	waitState(t, r, id, func(s State) bool { return s.Exited != nil })
	if err := r.Remove(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	assertGone(t, r, id)
}
