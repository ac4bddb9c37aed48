package devices

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FindCgroup2Mount returns where the cgroup2 filesystem is mounted, found by filesystem type
// in /proc/self/mountinfo: /sys/fs/cgroup on pure-v2 hosts, /sys/fs/cgroup/unified on hybrid
// ones. ErrNoCgroup2 when there is none. Equivalent to: findmnt -t cgroup2 -n -o TARGET
func FindCgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	defer f.Close()
	p, err := cgroup2MountIn(f)
	if err != nil {
		return "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	return p, nil
}

// Cgroup is a cgroup-v2 directory created for one launcher.
type Cgroup struct {
	Path string
}

// NewCgroup creates the cgroup parent/name; parent "" is the cgroup2 mount's root. It fails
// with fs.ErrExist if the cgroup exists: use a fresh one per launcher (after cgroup.kill, a
// cgroup kills every process started into it). Equivalent to: mkdir <parent>/<name>
func NewCgroup(parent, name string) (*Cgroup, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("create cgroup %q: %w", name, fs.ErrInvalid)
	}
	if parent == "" {
		root, err := FindCgroup2Mount()
		if err != nil {
			return nil, fmt.Errorf("create cgroup %q: %w", name, err)
		}
		parent = root
	}
	p := filepath.Join(parent, name)
	if err := os.Mkdir(p, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	return &Cgroup{Path: p}, nil
}

// Start starts cmd inside the cgroup from its first instruction (clone3 CLONE_INTO_CGROUP via
// SysProcAttr.UseCgroupFD/CgroupFD), so it never runs unfiltered. Other SysProcAttr fields
// (Pdeathsig, …) are kept.
func (c *Cgroup) Start(cmd *exec.Cmd) error {
	dir, err := openCgroup(c.Path)
	if err != nil {
		return fmt.Errorf("start in cgroup: %w", err)
	}
	defer dir.Close()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(dir.Fd())
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start in cgroup %s: %w", c.Path, err)
	}
	return nil
}

// Procs returns the pids in the cgroup itself (not its descendants). Equivalent to:
// cat cgroup.procs
func (c *Cgroup) Procs() ([]int, error) { return readProcs(c.Path) }

// Populated reports whether the cgroup or a descendant has a live process ("populated" in
// cgroup.events).
func (c *Cgroup) Populated() (bool, error) { return populated(c.Path) }

// Kill kills every process in the cgroup and its descendants and waits until none is left;
// see KillCgroup.
func (c *Cgroup) Kill(ctx context.Context) error { return KillCgroup(ctx, c.Path) }

// Remove kills every process in the cgroup and its descendants and removes them; see
// RemoveCgroup.
func (c *Cgroup) Remove(ctx context.Context) error { return RemoveCgroup(ctx, c.Path) }

// KillCgroup kills every process in the cgroup at path and below and waits for "populated 0"
// in cgroup.events with inotify, not by sleeping; ctx bounds the wait (ErrCgroupBusy).
// Equivalent to: echo 1 > cgroup.kill; inotifywait cgroup.events until "populated 0".
// Kernels before 5.14 have no cgroup.kill: every pid in the subtree gets SIGKILL instead.
func KillCgroup(ctx context.Context, path string) error {
	kill := func() error {
		err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0)
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(path); serr != nil {
				return serr
			}
			return killSubtree(path)
		}
		return err
	}
	if err := kill(); err != nil {
		return fmt.Errorf("kill cgroup %s: %w", path, err)
	}
	if err := waitUnpopulated(ctx, path, kill); err != nil {
		return fmt.Errorf("kill cgroup %s: %w", path, err)
	}
	return nil
}

// RemoveCgroup kills every process in the cgroup at path and below (KillCgroup) and removes
// the directories, children first. A missing cgroup is not an error.
// Equivalent to: KillCgroup; rmdir <children…> <path>
func RemoveCgroup(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := KillCgroup(ctx, path); err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	if err := removeTree(path); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	return nil
}

// killSubtree sends SIGKILL to every pid in path and its descendants.
func killSubtree(path string) error {
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		pids, err := readProcs(p)
		if err != nil {
			return err
		}
		for _, pid := range pids {
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("kill pid %d: %w", pid, err)
			}
		}
		return nil
	})
}

// removeTree removes the cgroup directories under and including path, deepest first.
func removeTree(path string) error {
	entries, err := os.ReadDir(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(path); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("rmdir %s: %w", path, err)
	}
	return nil
}

// waitUnpopulated blocks until cgroup.events says "populated 0", woken by inotify IN_MODIFY
// on that file (the kernel signals every change of it). retry runs after each wake-up that
// still finds processes (it re-kills stragglers on kernels without cgroup.kill).
func waitUnpopulated(ctx context.Context, path string, retry func() error) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify init: %w", err)
	}
	in := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads honour deadlines
	defer in.Close()
	if _, err := unix.InotifyAddWatch(fd, filepath.Join(path, "cgroup.events"), unix.IN_MODIFY); err != nil {
		return fmt.Errorf("watch cgroup.events: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = in.SetReadDeadline(time.Now()) })
	defer stop()
	if d, ok := ctx.Deadline(); ok {
		_ = in.SetReadDeadline(d)
	}
	buf := make([]byte, 4096)
	for {
		busy, err := populated(path)
		if err != nil {
			return err
		}
		if !busy {
			return nil
		}
		if err := retry(); err != nil {
			return err
		}
		if _, err := in.Read(buf); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("%w: %w", ErrCgroupBusy, context.Cause(ctx))
			}
			return fmt.Errorf("wait for cgroup.events: %w", err)
		}
	}
}

func populated(path string) (bool, error) {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("read cgroup.events: %w", err)
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("populated ")); ok {
			return string(v) != "0", nil
		}
	}
	return false, fmt.Errorf("read cgroup.events: no populated field: %w", ErrNoCgroup2)
}

func readProcs(path string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup.procs: %w", err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parse cgroup.procs %q: %w", f, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}
