package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/cpuweight"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/internal/revert"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// Names of the files in a launcher's run folder.
const (
	ReadySocket    = "launcher.sock"
	StartingSocket = "launcher.sock.starting"
	pidFile        = "launcher.pid"
	exitFile       = "launcher.exit"
	endFile        = "launcher.end" // the launcher's (qemu/launcher's EndRecord)
	logFile        = "launcher.log"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound is returned for a launcher this runtime does not know.
	ErrNotFound = errors.New("launcher not found")
	// ErrForeignProcess: a pid given as the launcher's QEMU is not a process of its jail.
	ErrForeignProcess = errors.New("not a process of the launcher's cgroup")
)

// Spec describes one launcher to run.
type Spec struct {
	ID   string // unique and stable per VMI (its UID); a file name
	Name string // human name for logs
	// Args are the launcher's arguments after the binary; the run folder is Runtime.Dir(ID).
	Args []string
	// Rules is the device filter for the launcher's cgroup (devices.Baseline).
	Rules []devices.Rule
	// BlockDevices are the block device nodes QEMU opens (the disks of Rules). The process
	// runtime's launchers open the node's, which storage hands to their user; the pod runtime
	// hands the container's own nodes (made by the container runtime, root's) to that user.
	BlockDevices []string
	// CPUMilli is the launcher's CPU request in milli-CPUs, as its pod would request in cluster
	// mode; its cgroup gets the kubelet's weight for it (cpuweight.PlanVM) when the runtime has
	// CPU weights. 0 is no request: the kubelet's minimum.
	CPUMilli int64
	// ProcessLabel, if set, is the SELinux context the launcher is executed with (set only
	// where SELinux is enabled: selinuxlabel.WithExecLabel refuses otherwise). The pod runtime
	// ignores it: a launcher pod's context is its seLinuxOptions'.
	ProcessLabel string
	// DirLabel, if set, is the SELinux file context of the run folder, written before the
	// launcher starts so that a confined launcher may make its sockets there (the pod runtime
	// writes its type at s0: a pod's level is not known before it runs).
	DirLabel string
}

// Exit tells how a launcher ended.
type Exit struct {
	Code   int    `json:"code"`             // exit status; -1 when killed by a signal or unknown
	Signal string `json:"signal,omitempty"` // terminating signal, if any
	Known  bool   `json:"known"`            // false: the process vanished while no agent watched
	At     time.Time
	// Detail is the launcher's own word on how its domain ended (its end record, e.g. "qemu
	// crash, signal killed") or, for a launcher that failed by itself, the last lines of its
	// log: written by the unprivileged launcher, so shown, never trusted.
	Detail string `json:"detail,omitempty"`
}

// State is a launcher's observed state.
type State struct {
	Pid    int
	Ready  bool  // the ready socket exists
	Exited *Exit // nil while running
}

// Runtime runs launchers as processes on this machine.
type Runtime struct {
	// Binary is the vmlet-launcher executable.
	Binary string
	// RunRoot holds one folder per launcher; keep it short (unix socket paths ≤ 107 bytes).
	RunRoot string
	// CgroupParent is the cgroup-v2 folder under which each launcher gets its own cgroup.
	CgroupParent string
	// OnExit is called (from a goroutine) when a launcher this runtime started exits.
	OnExit func(id string)
	// User is who launchers run as; the zero value leaves them root. A non-root launcher
	// owns its run folder (0700) and gets no capabilities and no_new_privs (see
	// startWithoutPrivileges); everything else it needs is handed to it.
	User User
	// CPU, when set, is the cpu controller's hierarchy (cpuweight.Find, Setup done): each
	// launcher's VM gets a CPU group weighted by Spec.CPUMilli with its vCPU threads in a
	// low-weight child (PlaceVCPUs). Nil: no weights, every launcher weighs as its parent.
	CPU *cpuweight.Hierarchy

	mu       sync.Mutex
	children map[string]chan struct{} // closed when the child is reaped
	watched  map[string]bool          // adopted launchers whose exit is being watched
}

// SetOnExit sets OnExit; call it before the first Ensure.
func (r *Runtime) SetOnExit(f func(id string)) { r.OnExit = f }

// Dir is the launcher's run folder.
func (r *Runtime) Dir(id string) string { return filepath.Join(r.RunRoot, id) }

// Socket is the launcher's ready socket path.
func (r *Runtime) Socket(id string) string { return filepath.Join(r.Dir(id), ReadySocket) }

func (r *Runtime) cgroupPath(id string) string { return filepath.Join(r.CgroupParent, "vmlet-"+id) }

// cpuGroup is the launcher's VM group in r.CPU (nil without weights): on v1 a folder of the cpu
// hierarchy named as the jail, on v2 the jail itself.
func (r *Runtime) cpuGroup(id string) *cpuweight.VM {
	if r.CPU == nil {
		return nil
	}
	return r.CPU.VM("vmlet-" + id)
}

// Ensure starts the launcher unless one already runs (or ran: an exited launcher is not
// restarted; Remove it first). It is idempotent and safe to call on every reconcile.
func (r *Runtime) Ensure(ctx context.Context, s Spec) (State, error) {
	if err := validID(s.ID); err != nil {
		return State{}, err
	}
	st, err := r.State(s.ID)
	if err == nil {
		if st.Exited == nil {
			err = r.adoptCPU(s, st.Pid)
		}
		return st, err
	}
	if !errors.Is(err, ErrNotFound) {
		return State{}, err
	}
	return r.start(ctx, s)
}

func (r *Runtime) start(_ context.Context, s Spec) (State, error) {
	dir := r.Dir(s.ID)
	undo := revert.New()
	defer undo.Fail()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return State{}, fmt.Errorf("make run dir: %w", err)
	}
	undo.Add(func() { _ = os.RemoveAll(dir) })
	// Opened before the folder is handed over, and never through a symlink: once the
	// launcher's user owns it, any process of that user may plant one at this name.
	logf, err := openLog(filepath.Join(dir, logFile))
	if err != nil {
		return State{}, err
	}
	defer logf.Close()
	if !r.User.Root() {
		if err := r.handOver(dir); err != nil {
			return State{}, err
		}
	}
	if s.DirLabel != "" {
		if err := selinuxlabel.SetFileLabel(dir, s.DirLabel); err != nil {
			return State{}, fmt.Errorf("label run dir: %w", err)
		}
	}
	// A cgroup of this ID with no launcher recorded is what an agent killed between making it
	// and recording the launcher left (TestFaultMatrix, agent-kill/launcher-start): whatever
	// runs in it was never handed over; it goes, so the fresh one can be made.
	if r.CgroupParent != "" {
		if err := devices.RemoveCgroup(context.Background(), r.cgroupPath(s.ID)); err != nil {
			return State{}, fmt.Errorf("remove the launcher cgroup a killed agent left: %w", err)
		}
	}
	jail, err := devices.NewJail(r.CgroupParent, "vmlet-"+s.ID, s.Rules)
	if err != nil {
		return State{}, fmt.Errorf("make launcher cgroup: %w", err)
	}
	undo.Add(func() { _ = jail.Close(context.Background()) })
	vm := r.cpuGroup(s.ID)
	if vm != nil {
		if err := vm.Create(cpuweight.PlanVM(s.CPUMilli)); err != nil {
			return State{}, err
		}
		undo.Add(func() { _ = vm.Remove(context.Background()) }) // after the kill below
	}
	cmd := exec.Command(r.Binary, s.Args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: the launcher (and its VM) must survive an agent restart.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := func() error { return jail.Start(cmd) }
	if s.ProcessLabel != "" {
		label, err := selinuxlabel.ParseContext(s.ProcessLabel)
		if err != nil {
			return State{}, fmt.Errorf("start launcher: %w", err)
		}
		// The exec label is the forking thread's: set on the thread that starts the child.
		plain := start
		start = func() error { return selinuxlabel.WithExecLabel(label, plain) }
	}
	if !r.User.Root() {
		cmd.SysProcAttr.Credential = r.User.credential()
		labelled := start
		start = func() error { return startWithoutPrivileges(labelled) }
	}
	if err := start(); err != nil {
		return State{}, fmt.Errorf("start launcher: %w", err)
	}
	undo.Add(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if vm != nil {
		// On v1 the launcher was born in the agent's group (no clone into a v1 cgroup): move it
		// before it starts QEMU, which the agent asks for only once it is ready.
		if err := r.CPU.AddLauncher(cmd.Process.Pid); err != nil {
			return State{}, err
		}
	}
	if err := writeRecord(dir, pidFile, []byte(strconv.Itoa(cmd.Process.Pid))); err != nil {
		return State{}, fmt.Errorf("write pid file: %w", err)
	}
	undo.Success()
	r.mu.Lock()
	if r.children == nil {
		r.children = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	r.children[s.ID] = done
	r.mu.Unlock()
	go r.reap(s.ID, cmd, done)
	return State{Pid: cmd.Process.Pid}, nil
}

// adoptCPU gives a running launcher that has no CPU group yet (started by an agent without CPU
// weights) its groups: the launcher (pid) joins the launchers group, any other process of its
// jail (QEMU) the VM's group; the vCPU threads follow with PlaceVCPUs. A no-op once the group
// exists: one stat per reconcile.
func (r *Runtime) adoptCPU(s Spec, pid int) error {
	vm := r.cpuGroup(s.ID)
	if vm == nil || vm.Exists() {
		return nil
	}
	if err := vm.Create(cpuweight.PlanVM(s.CPUMilli)); err != nil {
		return err
	}
	procs, err := (&devices.Cgroup{Path: r.cgroupPath(s.ID)}).Procs()
	if err != nil {
		return fmt.Errorf("adopt launcher into its cpu group: %w", err)
	}
	for _, p := range procs {
		add := vm.AddProcess
		if p == pid {
			add = r.CPU.AddLauncher
		}
		if err := add(p); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// VCPUsPlaced reports whether the launcher's vCPU threads are in their group (the vcpus group
// is not empty), or that there is nothing to place: no CPU weights, or no group.
// Equivalent to: test -s <vm>/vcpus/tasks
func (r *Runtime) VCPUsPlaced(id string) (bool, error) {
	vm := r.cpuGroup(id)
	if vm == nil || !vm.Exists() {
		return true, nil
	}
	tids, err := vm.VCPUThreads()
	if err != nil {
		return false, fmt.Errorf("read vcpu threads: %w", err)
	}
	return len(tids) > 0, nil
}

// PlaceVCPUs moves the launcher's QEMU (qemuPid, as the launcher reports it) into the VM's
// CPU group and its vCPU threads tids (QMP query-cpus-fast) into the VM's low-weight vcpus
// group. The launcher is not trusted with other processes: QEMU must be a process of its
// jail (ErrForeignProcess), and only threads then in the VM's group move
// (cpuweight.ErrForeignThread). A no-op without CPU weights.
func (r *Runtime) PlaceVCPUs(id string, qemuPid int, tids []int) error {
	if err := validID(id); err != nil {
		return err
	}
	vm := r.cpuGroup(id)
	if vm == nil {
		return nil
	}
	procs, err := (&devices.Cgroup{Path: r.cgroupPath(id)}).Procs()
	if err != nil {
		return fmt.Errorf("place qemu: %w", err)
	}
	if !slices.Contains(procs, qemuPid) {
		return fmt.Errorf("place qemu: pid %d: %w %s", qemuPid, ErrForeignProcess, r.cgroupPath(id))
	}
	if err := vm.AddProcess(qemuPid); err != nil {
		return err
	}
	return vm.PlaceVCPUs(tids)
}

// handOver gives the run folder to the launcher's user (0700: its sockets and logs are
// private to it and to root) and lets that user through the run root (o+x, no listing).
// Equivalent to: chown U:G <run root>/<id> && chmod o+x <run root>
func (r *Runtime) handOver(dir string) error {
	fi, err := os.Stat(r.RunRoot)
	if err != nil {
		return fmt.Errorf("hand run dir over: %w", err)
	}
	if fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(r.RunRoot, fi.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("hand run dir over: %w", err)
		}
	}
	if err := CheckSearchable(r.RunRoot, r.User, os.Stat); err != nil {
		return fmt.Errorf("hand run dir over: %w", err)
	}
	if err := os.Chown(dir, int(r.User.UID), int(r.User.GID)); err != nil {
		return fmt.Errorf("hand run dir over: %w", err)
	}
	return nil
}

// reap owns cmd.Wait for a child and records how it ended.
func (r *Runtime) reap(id string, cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	ex := Exit{Code: cmd.ProcessState.ExitCode(), Known: true, At: time.Now()}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ex.Signal = ws.Signal().String()
	}
	_ = err // the exit status is in ProcessState
	ex.Detail = exitDetail(r.Dir(id), ex)
	if b, jerr := json.Marshal(ex); jerr == nil {
		_ = writeRecord(r.Dir(id), exitFile, b)
	}
	r.mu.Lock()
	delete(r.children, id)
	r.mu.Unlock()
	close(done)
	if r.OnExit != nil {
		r.OnExit(id)
	}
}

// State reports a launcher's state from its run folder: ErrNotFound when it has none.
func (r *Runtime) State(id string) (State, error) {
	dir := r.Dir(id)
	b, err := readRecord(filepath.Join(dir, pidFile))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("launcher %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return State{}, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil || pid <= 0 {
		return State{}, fmt.Errorf("read pid file: bad pid %q", b)
	}
	st := State{Pid: pid}
	if st.Exited = readExit(dir); st.Exited != nil {
		return st, nil
	}
	if !r.alive(id, pid) {
		r.mu.Lock()
		_, child := r.children[id]
		r.mu.Unlock()
		if !child {
			// A child's exit is recorded by reap, which writes the exit file before it forgets
			// the child: read it again, the child may have been reaped since the first read.
			// Anything else vanished unobserved.
			if st.Exited = readExit(dir); st.Exited == nil {
				st.Exited = &Exit{Code: -1, Known: false, At: time.Now()}
				st.Exited.Detail = exitDetail(dir, *st.Exited)
			}
			return st, nil
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ReadySocket)); err == nil {
		st.Ready = true
	}
	r.watchAdopted(id, pid)
	return st, nil
}

// readExit reads the exit file reap wrote, or returns nil.
func readExit(dir string) *Exit {
	b, err := readRecord(filepath.Join(dir, exitFile))
	if err != nil {
		return nil
	}
	var ex Exit
	if json.Unmarshal(b, &ex) != nil {
		return nil
	}
	return &ex
}

// exitDetail is what tells how the launcher in dir ended: its end record's detail, else, for a
// launcher that failed by itself (a status other than 0, no signal; it ended before or without
// a domain, e.g. QEMU could not start), the last lines of its log, which go with the run
// folder. "" when neither says anything.
func exitDetail(dir string, ex Exit) string {
	if d := readEnd(dir); d != "" || ex.Signal != "" || ex.Code == 0 {
		return d
	}
	return logTail(filepath.Join(dir, logFile), logTailLines)
}

// readEnd returns the detail of the launcher's end record in dir (a record: at most 4 KiB
// read), "" when there is none. Whoever shows it cleans it (vmistatus.WithDetail).
func readEnd(dir string) string {
	b, err := readRecord(filepath.Join(dir, endFile))
	if err != nil {
		return ""
	}
	var end struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &end) != nil {
		return ""
	}
	return end.Detail
}

// watchAdopted reports the exit of a running launcher that is not this runtime's child (it was
// started by an agent before a restart) through OnExit, using a pidfd: no polling.
func (r *Runtime) watchAdopted(id string, pid int) {
	r.mu.Lock()
	_, child := r.children[id]
	if child || r.watched[id] || r.OnExit == nil {
		r.mu.Unlock()
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		r.mu.Unlock()
		return
	}
	if r.watched == nil {
		r.watched = map[string]bool{}
	}
	r.watched[id] = true
	r.mu.Unlock()
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
				break
			}
		}
		r.mu.Lock()
		delete(r.watched, id)
		r.mu.Unlock()
		r.OnExit(id)
	}()
}

// alive reports whether pid is still the launcher in id's cgroup (guards against pid reuse).
func (r *Runtime) alive(id string, pid int) bool {
	if err := unix.Kill(pid, 0); err != nil {
		return false
	}
	cg := &devices.Cgroup{Path: r.cgroupPath(id)}
	procs, err := cg.Procs()
	if err != nil {
		return false
	}
	for _, p := range procs {
		if p == pid {
			return true
		}
	}
	return false
}

// Stop sends SIGTERM to a running launcher (graceful guest shutdown within its grace period).
func (r *Runtime) Stop(id string) error {
	st, err := r.State(id)
	if err != nil {
		return err
	}
	if st.Exited != nil {
		return nil
	}
	if err := unix.Kill(st.Pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal launcher: %w", err)
	}
	return nil
}

// Remove kills whatever still runs in the launcher's cgroup, removes the cgroup (and with it the
// device filter) and its CPU groups, and deletes the run folder. Idempotent.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	cg := &devices.Cgroup{Path: r.cgroupPath(id)}
	if _, err := os.Stat(cg.Path); err == nil {
		if err := cg.Remove(ctx); err != nil {
			return fmt.Errorf("remove launcher cgroup: %w", err)
		}
	}
	if vm := r.cpuGroup(id); vm != nil {
		// Its tasks died with the jail's.
		if err := vm.Remove(ctx); err != nil {
			return err
		}
	}
	r.mu.Lock()
	done := r.children[id]
	r.mu.Unlock()
	if done != nil {
		// The reaper goroutine records the exit; wait for it so no zombie is left.
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("wait for launcher exit: %w", ctx.Err())
		}
	}
	// A file written while the folder is removed (the exit record of a reaper of another
	// Runtime on the same run root: an agent's tests adopt with a second one) makes RemoveAll
	// fail with ENOTEMPTY: it is removed again.
	err := os.RemoveAll(r.Dir(id))
	for try := 0; try < 3 && errors.Is(err, unix.ENOTEMPTY); try++ {
		err = os.RemoveAll(r.Dir(id))
	}
	if err != nil {
		return fmt.Errorf("remove run dir: %w", err)
	}
	return nil
}

// List returns the ids of all launchers with a run folder (running or exited): a folder of the
// run root with a launcher id's name that holds a launcher's log (start makes it first). Another
// folder there is not a launcher's and is left alone (a node shutdown removes every launcher's
// folder: a Kubernetes node's /run/vmlet/launchers once went that way).
func (r *Runtime) List() ([]string, error) {
	ents, err := os.ReadDir(r.RunRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list run root: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(r.RunRoot, e.Name(), logFile)); err == nil && fi.Mode().IsRegular() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

func validID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("launcher id %q: bad length", id)
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return fmt.Errorf("launcher id %q: only [a-z0-9-]", id)
		}
	}
	return nil
}
