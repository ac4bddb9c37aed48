package cpuweight

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Version is a cgroup hierarchy's version.
type Version int

// The two cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Names of the groups under Hierarchy.Root.
const (
	SystemGroup   = "system"    // the agent and the local control plane
	LauncherGroup = "launchers" // every vmlet-launcher process (v1)
	VCPUGroup     = "vcpus"     // a VM group's child holding its vCPU threads
)

// Hierarchy is where vmlet's CPU groups live: Root is <mount>/<parent> of the hierarchy that
// has the cpu controller.
type Hierarchy struct {
	Version Version
	Root    string
	// Mount is the hierarchy's mount point (its root group), where LeaveSystem moves a process.
	Mount string
}

// Find returns the hierarchy with the cpu controller for parent (the node's --cgroup-parent, a
// path relative to the mount): the cgroup-v1 cpu hierarchy if one is mounted (hybrid hosts),
// else cgroup2 if its root's cgroup.controllers lists cpu; ErrNoCPUController otherwise.
// Mounts are found by file system type in /proc/self/mountinfo. It creates nothing (Setup).
// Equivalent to: findmnt -t cgroup -O cpu || (findmnt -t cgroup2 && grep -w cpu cgroup.controllers)
func Find(parent string) (*Hierarchy, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("find cpu controller: %w", err)
	}
	defer f.Close()
	m, err := parseMounts(f)
	if err != nil {
		return nil, fmt.Errorf("find cpu controller: %w", err)
	}
	if m.v1CPU != "" {
		return &Hierarchy{Version: V1, Root: filepath.Join(m.v1CPU, parent), Mount: m.v1CPU}, nil
	}
	if m.v2 != "" {
		b, err := os.ReadFile(filepath.Join(m.v2, "cgroup.controllers"))
		if err == nil && slices.Contains(strings.Fields(string(b)), "cpu") {
			return &Hierarchy{Version: V2, Root: filepath.Join(m.v2, parent), Mount: m.v2}, nil
		}
	}
	return nil, fmt.Errorf("find cpu controller: %w", ErrNoCPUController)
}

// Setup creates Root with NodeShares(), the system group with SystemShares and (v1) the
// launchers group with LauncherShares; on v2 it first
// enables the cpu controller in cgroup.subtree_control from the mount's root down to Root
// (which fails with EBUSY where a cgroup on the way holds processes: cgroup v2 has no internal
// processes). Idempotent. Equivalent to: mkdir -p <root>/system; echo 2048 > <root>/cpu.shares;
// echo 262144 > <root>/system/cpu.shares (v2: echo +cpu > …/cgroup.subtree_control on each
// level; cpu.weight 79 and 10000)
func (h *Hierarchy) Setup() error {
	if err := os.MkdirAll(h.Root, 0o755); err != nil {
		return fmt.Errorf("set up cpu cgroups: %w", err)
	}
	if h.Version == V2 {
		if err := enableCPU(h.Root); err != nil {
			return fmt.Errorf("set up cpu cgroups: %w", err)
		}
	}
	if err := h.setShares(h.Root, NodeShares()); err != nil {
		return fmt.Errorf("set up cpu cgroups: %w", err)
	}
	groups := map[string]uint64{h.SystemPath(): SystemShares}
	if h.Version == V1 {
		groups[h.LauncherPath()] = LauncherShares
	}
	for dir, shares := range groups {
		if err := mkdir(dir); err != nil {
			return fmt.Errorf("set up cpu cgroups: %w", err)
		}
		if err := h.setShares(dir, shares); err != nil {
			return fmt.Errorf("set up cpu cgroups: %w", err)
		}
	}
	return nil
}

// enableCPU writes "+cpu" to the subtree_control of root's ancestors up to the cgroup2 mount
// and of root itself, top down, skipping levels where it is enabled already.
func enableCPU(root string) error {
	var levels []string
	for d := root; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cgroup.subtree_control")); err != nil {
			break
		}
		levels = append(levels, d)
		if d == "/" {
			break
		}
	}
	for _, d := range slices.Backward(levels) {
		p := filepath.Join(d, "cgroup.subtree_control")
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if slices.Contains(strings.Fields(string(b)), "cpu") {
			continue
		}
		if err := write(p, "+cpu"); err != nil {
			return err
		}
	}
	return nil
}

// SystemPath is the system group's folder.
func (h *Hierarchy) SystemPath() string { return filepath.Join(h.Root, SystemGroup) }

// Teardown removes the node-level groups Setup made (system, launchers, Root on v1) once
// nothing runs in them and no VM group is left: local mode's graceful shutdown, tests and
// uninstalls; the node agent (`vmlet agent`) keeps them, as the kubelet keeps kubepods.
// Equivalent to: rmdir <root>/system <root>/launchers <root>
func (h *Hierarchy) Teardown() error {
	dirs := []string{h.SystemPath(), h.LauncherPath()}
	if h.Version == V1 {
		dirs = append(dirs, h.Root) // on v2 Root holds the jails' parent: the runtime's
	}
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// LauncherPath is the launchers group's folder (v1; on v2 launchers stay in their jails).
func (h *Hierarchy) LauncherPath() string { return filepath.Join(h.Root, LauncherGroup) }

// AddLauncher moves launcher process pid (all its threads) into the launchers group, where
// its QEMU is born too until the agent moves QEMU into the VM's group (VM.AddProcess). On v2
// a no-op: the launcher stays in its jail, the VM's group.
// Equivalent to: echo PID > <root>/launchers/cgroup.procs
func (h *Hierarchy) AddLauncher(pid int) error {
	if h.Version == V2 {
		return nil
	}
	if err := write(filepath.Join(h.LauncherPath(), "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move launcher into the launchers cpu group: %w", err)
	}
	return nil
}

// JoinSystem moves process pid (all its threads) into the system group; its children started
// later are born there. Equivalent to: echo PID > <root>/system/cgroup.procs
func (h *Hierarchy) JoinSystem(pid int) error {
	if err := write(filepath.Join(h.SystemPath(), "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("join system cpu group: %w", err)
	}
	return nil
}

// LeaveSystem moves process pid (all its threads) out of the system group into the
// hierarchy's root group, as a process never placed: a process that joined the system group
// leaves it before Teardown removes the group. Equivalent to: echo PID > <mount>/cgroup.procs
func (h *Hierarchy) LeaveSystem(pid int) error {
	if err := write(filepath.Join(h.Mount, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("leave system cpu group: %w", err)
	}
	return nil
}

// VM is the handle of one VM's group, Root/name; making it touches nothing.
func (h *Hierarchy) VM(name string) *VM {
	return &VM{h: h, Path: filepath.Join(h.Root, name)}
}

func (h *Hierarchy) setShares(dir string, shares uint64) error {
	if h.Version == V2 {
		return write(filepath.Join(dir, "cpu.weight"), strconv.FormatUint(SharesToWeight(shares), 10))
	}
	return write(filepath.Join(dir, "cpu.shares"), strconv.FormatUint(shares, 10))
}

// threadsFile lists (and takes) single threads: v1 tasks, v2 cgroup.threads.
func (h *Hierarchy) threadsFile() string {
	if h.Version == V2 {
		return "cgroup.threads"
	}
	return "tasks"
}

// VM is one VM's CPU group and its vcpus child.
type VM struct {
	h    *Hierarchy
	Path string
}

// VCPUPath is the vcpus group's folder.
func (v *VM) VCPUPath() string { return filepath.Join(v.Path, VCPUGroup) }

// Exists reports whether the VM's vcpus group exists (Create completed once).
func (v *VM) Exists() bool {
	_, err := os.Stat(v.VCPUPath())
	return err == nil
}

// Create makes the VM's groups with plan p. On v1 it creates Path (the VM's group in the cpu
// hierarchy); on v2 Path is the launcher's jail and must exist. Then the vcpus child (v2: made
// threaded, and the cpu controller enabled in the jail for it). Idempotent; weights are
// written each time. Equivalent to: mkdir -p <vm>/vcpus; echo SHARES > <vm>/cpu.shares;
// echo 2 > <vm>/vcpus/cpu.shares (v2: echo threaded > <vm>/vcpus/cgroup.type;
// echo +cpu > <vm>/cgroup.subtree_control; cpu.weight)
func (v *VM) Create(p Plan) error {
	if v.h.Version == V1 {
		if err := mkdir(v.Path); err != nil {
			return fmt.Errorf("create vm cpu group: %w", err)
		}
	}
	if err := v.h.setShares(v.Path, p.Shares); err != nil {
		return fmt.Errorf("create vm cpu group: %w", err)
	}
	vc := v.VCPUPath()
	if err := mkdir(vc); err != nil {
		return fmt.Errorf("create vcpu cpu group: %w", err)
	}
	if v.h.Version == V2 {
		if err := makeThreaded(vc); err != nil {
			return fmt.Errorf("create vcpu cpu group: %w", err)
		}
		if err := enableCPU(v.Path); err != nil {
			return fmt.Errorf("create vcpu cpu group: %w", err)
		}
	}
	if err := v.h.setShares(vc, p.VCPUShares); err != nil {
		return fmt.Errorf("create vcpu cpu group: %w", err)
	}
	return nil
}

func makeThreaded(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.type"))
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(b)) == "threaded" {
		return nil
	}
	return write(filepath.Join(dir, "cgroup.type"), "threaded")
}

// AddProcess moves process pid (QEMU; all its threads, vCPUs included) into the VM's group:
// on v1, where QEMU is born in the launchers group; on v2 it is born in its jail, the VM's
// group, and this is a no-op. Equivalent to: echo PID > <vm>/cgroup.procs
func (v *VM) AddProcess(pid int) error {
	if v.h.Version == V2 {
		return nil
	}
	if err := write(filepath.Join(v.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move qemu into its vm cpu group: %w", err)
	}
	return nil
}

// Threads are the thread ids in the VM's group itself (not in vcpus).
func (v *VM) Threads() ([]int, error) { return readIDs(filepath.Join(v.Path, v.h.threadsFile())) }

// VCPUThreads are the thread ids in the vcpus group.
func (v *VM) VCPUThreads() ([]int, error) {
	return readIDs(filepath.Join(v.VCPUPath(), v.h.threadsFile()))
}

// PlaceVCPUs moves the threads tids (QEMU's vCPU threads, QMP query-cpus-fast "thread-id")
// into the vcpus group. Each must be a thread of the VM's group or already in vcpus, else
// nothing moves and the error wraps ErrForeignThread: the ids come from the unprivileged
// launcher. Equivalent to: echo TID > <vm>/vcpus/tasks (v2: cgroup.threads), per thread
func (v *VM) PlaceVCPUs(tids []int) error {
	in, err := v.Threads()
	if err != nil {
		return fmt.Errorf("place vcpu threads: %w", err)
	}
	done, err := v.VCPUThreads()
	if err != nil {
		return fmt.Errorf("place vcpu threads: %w", err)
	}
	var move []int
	for _, t := range tids {
		switch {
		case slices.Contains(done, t):
		case slices.Contains(in, t):
			move = append(move, t)
		default:
			return fmt.Errorf("place vcpu threads: thread %d: %w %s", t, ErrForeignThread, v.Path)
		}
	}
	f := filepath.Join(v.VCPUPath(), v.h.threadsFile())
	for _, t := range move {
		if err := write(f, strconv.Itoa(t)); err != nil {
			return fmt.Errorf("place vcpu thread %d: %w", t, err)
		}
	}
	return nil
}

// Remove removes the VM's groups once their tasks are gone (call it after the launcher's
// jail was killed); ctx bounds the wait for exiting tasks (ErrBusy). On v2 the groups are the
// jail's and go with it: nothing to do. A missing group is not an error.
// Equivalent to: rmdir <vm>/vcpus <vm>
func (v *VM) Remove(ctx context.Context) error {
	if v.h.Version == V2 {
		return nil
	}
	for _, d := range []string{v.VCPUPath(), v.Path} {
		if err := rmdir(ctx, d); err != nil {
			return fmt.Errorf("remove vm cpu group: %w", err)
		}
	}
	return nil
}

// rmdir removes an empty cgroup, retrying while the kernel still counts exiting tasks.
func rmdir(ctx context.Context, dir string) error {
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("rmdir %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			tasks, _ := readIDs(filepath.Join(dir, "tasks"))
			return fmt.Errorf("rmdir %s: %w: tasks %v: %w", dir, ErrBusy, tasks, context.Cause(ctx))
		case <-time.After(wait):
		}
	}
}

func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// write writes one value to a cgroup file (no O_CREAT, no O_TRUNC: kernfs files exist).
func write(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

func readIDs(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ids []int
	for f := range strings.FieldsSeq(string(b)) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
