package podruntime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// LabelVMIUID is the launcher pod label naming its VMI's UID.
const LabelVMIUID = launcherpod.LabelVMIUID

// Runtime finds launchers in launcher pods on this node.
type Runtime struct {
	// Pods reads this node's launcher pods (the manager's cache).
	Pods client.Reader
	// Live reads them from the API server itself, where a cache a moment behind would do harm:
	// Remove asks it whether the pod is being deleted before it kills a launcher (a VMI failed
	// because its pod is being deleted can reach the agent before the pod's deletion does).
	// nil: Pods.
	Live client.Reader
	// Resizer writes launcher pods' resize subresource (CPU and memory hotplug); nil: this
	// agent resizes no pod, and hotplug that needs more resources is refused.
	Resizer client.SubResourceClientConstructor
	// LauncherRoot is the host folder holding one run folder per launcher pod (its hostPath
	// volume), by VMI UID.
	LauncherRoot string
	// CgroupRoot is the cgroup2 mount the launchers' cgroups are under.
	CgroupRoot string
	// OnExit is called when a launcher pod's container ends or the pod goes away.
	OnExit func(id string)
	// User is the launcher pods' user (their runAsUser/runAsGroup: launcherpod.Options):
	// Ensure makes each run folder for it, which the pod waits for (a Directory hostPath).
	User process.User

	mu    sync.Mutex
	procs map[string]proc // launchers seen serving, by id
}

// proc is one launcher process: PID plus start time, so a reused PID is not mistaken for it.
type proc struct {
	pid      int
	start    uint64
	filtered bool // vmlet's device program is on its cgroup
}

// SetOnExit sets OnExit.
func (r *Runtime) SetOnExit(f func(id string)) { r.OnExit = f }

// Dir is the launcher's run folder on the host.
func (r *Runtime) Dir(id string) string { return filepath.Join(r.LauncherRoot, id) }

// Socket is the launcher's ready socket.
func (r *Runtime) Socket(id string) string { return filepath.Join(r.Dir(id), process.ReadySocket) }

// pod returns the launcher pod of VMI id, nil if there is none.
func (r *Runtime) pod(ctx context.Context, id string) (*corev1.Pod, error) {
	return podOf(ctx, r.Pods, id)
}

// podOf is the newest launcher pod of id that reader lists.
func podOf(ctx context.Context, reader client.Reader, id string) (*corev1.Pod, error) {
	var l corev1.PodList
	if err := reader.List(ctx, &l, client.MatchingLabels{LabelVMIUID: id}); err != nil {
		return nil, fmt.Errorf("list launcher pods: %w", err)
	}
	var found *corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		if found == nil || p.CreationTimestamp.After(found.CreationTimestamp.Time) {
			found = p
		}
	}
	return found, nil
}

// Ensure starts nothing (the kubelet runs the pod); once the launcher serves it installs the
// device filter spec.Rules on the launcher's cgroup, then reports the state.
func (r *Runtime) Ensure(ctx context.Context, s process.Spec) (process.State, error) {
	if err := r.makeRunDir(s.ID, s.DirLabel); err != nil {
		return process.State{}, err
	}
	st, err := r.state(ctx, s.ID)
	if errors.Is(err, process.ErrNotFound) {
		return process.State{}, nil // the pod is not in this agent's cache yet
	}
	if err != nil || st.Exited != nil || st.Pid == 0 {
		return st, err
	}
	if err := r.filter(s.ID, st.Pid, s.Rules, s.BlockDevices); err != nil {
		return st, err
	}
	return st, nil
}

// makeRunDir makes the launcher's run folder, owned by its user, 0700 (idempotent), and lets
// that user through LauncherRoot. Equivalent to: install -d -o U -g G -m 0700 <root>/<id>
//
// A new folder gets label's type at s0 (no categories): the pod's level is the container
// runtime's choice, unknown until the launcher runs, and a launcher at any level may make its
// sockets in an s0 folder. The agent relabels it at the launcher's level once it reads that
// level from the process (before the domain starts).
func (r *Runtime) makeRunDir(id, label string) error {
	if err := os.MkdirAll(r.LauncherRoot, 0o711); err != nil {
		return fmt.Errorf("make run dir: %w", err)
	}
	if err := process.CheckSearchable(r.LauncherRoot, r.User, os.Stat); err != nil {
		return fmt.Errorf("make run dir: %w", err)
	}
	dir := r.Dir(id)
	err := os.Mkdir(dir, 0o700)
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make run dir: %w", err)
	}
	if c, perr := selinuxlabel.ParseContext(label); err == nil && label != "" && perr == nil {
		c.Level = selinuxlabel.SharedLevel
		if err := selinuxlabel.SetFileLabel(dir, c.String()); err != nil {
			return fmt.Errorf("make run dir: %w", err)
		}
	}
	if err := os.Chown(dir, int(r.User.UID), int(r.User.GID)); err != nil {
		return fmt.Errorf("make run dir: %w", err)
	}
	return nil
}

// filter installs vmlet's device program on the launcher's cgroup (once per agent process; a
// new agent installs it again, atomically replacing the old one). runc's default rules are
// kept: they are what every container may use. First it hands the container's block device
// nodes (its claims' volumeDevices) to the launcher's user.
func (r *Runtime) filter(id string, pid int, rules []devices.Rule, nodes []string) error {
	r.mu.Lock()
	p, ok := r.procs[id]
	r.mu.Unlock()
	if ok && p.filtered {
		return nil
	}
	if err := OwnDeviceNodes(pid, nodes, r.User); err != nil {
		return err
	}
	cg, err := cgroupOf(pid)
	if err != nil {
		return err
	}
	f, err := devices.ReplaceKeeping(filepath.Join(r.CgroupRoot, cg), devices.RuncDefaultRules(), rules)
	if err != nil {
		return fmt.Errorf("filter launcher devices: %w", err)
	}
	_ = f.Close() // the program stays attached; the agent keeps no handle
	r.mu.Lock()
	if p, ok := r.procs[id]; ok && p.pid == pid {
		p.filtered = true
		r.procs[id] = p
	}
	r.mu.Unlock()
	return nil
}

// State reports the launcher of VMI id: ErrNotFound when there is neither a pod nor a run folder.
func (r *Runtime) State(id string) (process.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.state(ctx, id)
}

func (r *Runtime) state(ctx context.Context, id string) (process.State, error) {
	pod, err := r.pod(ctx, id)
	if err != nil {
		return process.State{}, err
	}
	pid := r.serving(id)
	if ex := exitOf(pod); ex != nil {
		return process.State{Pid: pid, Exited: ex}, nil
	}
	_, dirErr := os.Stat(r.Dir(id))
	switch {
	case pod == nil && pid == 0 && errors.Is(dirErr, os.ErrNotExist):
		return process.State{}, fmt.Errorf("launcher %s: %w", id, process.ErrNotFound)
	case pod == nil && pid == 0:
		// A run folder but no pod and nothing serving: the pod went while no one watched.
		return process.State{Exited: &process.Exit{Code: -1, At: time.Now()}}, nil
	}
	return process.State{Pid: pid, Ready: pid != 0}, nil
}

// serving returns the PID of the launcher serving id's ready socket, 0 if none does.
func (r *Runtime) serving(id string) int {
	r.mu.Lock()
	p, ok := r.procs[id]
	r.mu.Unlock()
	if ok {
		if st, err := startTime(p.pid); err == nil && st == p.start {
			if _, err := os.Stat(r.Socket(id)); err == nil {
				return p.pid
			}
		}
		r.mu.Lock()
		delete(r.procs, id)
		r.mu.Unlock()
	}
	pid, err := peerPID(r.Socket(id))
	if err != nil {
		return 0
	}
	st, err := startTime(pid)
	if err != nil {
		return 0
	}
	r.mu.Lock()
	if r.procs == nil {
		r.procs = map[string]proc{}
	}
	r.procs[id] = proc{pid: pid, start: st}
	r.mu.Unlock()
	return pid
}

// exitOf tells how the pod's launcher container ended, nil while it runs (or has not started).
func exitOf(pod *corev1.Pod) *process.Exit {
	if pod == nil {
		return nil
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			ex := &process.Exit{Code: int(t.ExitCode), Known: true, At: t.FinishedAt.Time}
			if t.Signal != 0 {
				ex.Signal = unix.SignalName(unix.Signal(t.Signal))
			}
			return ex
		}
	}
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		code := 0
		if pod.Status.Phase == corev1.PodFailed {
			code = -1
		}
		return &process.Exit{Code: code, Known: true, At: time.Now()}
	}
	return nil
}

// Stop sends SIGTERM to the launcher: it powers the guest down within its grace period and
// exits, which ends its pod.
func (r *Runtime) Stop(id string) error {
	pid := r.serving(id)
	if pid == 0 {
		return nil
	}
	if err := unix.Kill(pid, unix.SIGTERM); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal launcher: %w", err)
	}
	return nil
}

// ErrPodTerminating is Remove's answer while the launcher's pod is being deleted within its
// grace period: the kubelet has signalled the launcher, which is shutting its guest down; the
// launcher's exit (WatchExits) wakes the caller to remove it again.
var ErrPodTerminating = errors.New("launcher pod terminating within its grace period: the launcher shuts its guest down")

// Remove kills a launcher still serving, waits until it is gone and deletes its run folder.
// The pod (and with it the cgroup and network namespace) is the cluster controller's to delete.
// A launcher whose pod is being deleted is not killed before the pod's deletion deadline (its
// deletionTimestamp: the request's time plus the grace period): the kubelet's SIGTERM makes it
// shut the guest down gracefully, and a VMI failed meanwhile (LauncherPodDeleted) must not cut
// that short; ErrPodTerminating then.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if pid := r.serving(id); pid != 0 {
		live := r.Live
		if live == nil {
			live = r.Pods
		}
		if pod, err := podOf(ctx, live, id); err == nil && pod != nil && pod.DeletionTimestamp != nil &&
			time.Now().Before(pod.DeletionTimestamp.Time) {
			return fmt.Errorf("remove launcher %s: %w", id, ErrPodTerminating)
		}
		r.mu.Lock()
		p := r.procs[id]
		r.mu.Unlock()
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("kill launcher: %w", err)
		}
		if err := waitGone(ctx, p); err != nil {
			return err
		}
	}
	r.mu.Lock()
	delete(r.procs, id)
	r.mu.Unlock()
	if err := unpin(r.Dir(id)); err != nil {
		return err
	}
	if err := os.RemoveAll(r.Dir(id)); err != nil {
		return fmt.Errorf("remove run dir: %w", err)
	}
	return nil
}

// waitGone waits until process p has exited (a zombie counts: it runs nothing), with a pidfd.
func waitGone(ctx context.Context, p proc) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open launcher pidfd: %w", err)
	}
	defer unix.Close(fd)
	if st, err := startTime(p.pid); err != nil || st != p.start {
		return nil // already gone, or the PID is someone else's now
	}
	for {
		ms := 1000
		if d, ok := ctx.Deadline(); ok {
			ms = min(ms, max(int(time.Until(d).Milliseconds()), 0))
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for launcher exit: %w", err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for launcher exit: %w", err)
		}
	}
}

// List returns the ids of all launchers with a run folder.
func (r *Runtime) List() ([]string, error) {
	ents, err := os.ReadDir(r.LauncherRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list launcher root: %w", err)
	}
	var ids []string
	for _, e := range ents {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}
