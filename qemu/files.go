package qemu

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/revert"
)

// childFiles are the files QEMU inherits (exec.Cmd.ExtraFiles order: fd 3, 4, ...) and the
// paths vmlet created for this VM.
type childFiles struct {
	files   []*os.File
	fds     FDs
	created []string // sockets and folders, removed (in reverse) when the VM is gone
}

// add appends f and returns its fd number in the child.
func (c *childFiles) add(f *os.File) int {
	c.files = append(c.files, f)
	return 2 + len(c.files)
}

// closeFiles closes this process's copies; QEMU keeps its own.
func (c *childFiles) closeFiles() {
	for _, f := range c.files {
		f.Close()
	}
	c.files = nil
}

// openChildFiles binds the sockets (QMP, serial, agent) and opens the serial log and, when
// their paths are not plain, the kernel and initrd. On error nothing is left behind.
func openChildFiles(spec *Spec, qmpSocket string) (_ *childFiles, err error) {
	c := &childFiles{}
	r := revert.New()
	defer r.Fail()
	r.Add(func() { c.closeFiles(); removeAll(nil, c.created) })
	listen := func(path string) (int, error) {
		f, err := listenUnix(path)
		if err != nil {
			return 0, err
		}
		c.created = append(c.created, path)
		return c.add(f), nil
	}
	if c.fds.QMP, err = listen(qmpSocket); err != nil {
		return nil, err
	}
	if s := spec.Serial; s != nil {
		if c.fds.Serial, err = listen(s.Socket); err != nil {
			return nil, err
		}
		if s.LogFile != "" {
			f, err := OpenLog(s.LogFile, 0o640)
			if err != nil {
				return nil, fmt.Errorf("open serial log: %w", err)
			}
			c.fds.SerialLog = c.add(f)
		}
	}
	if spec.Agent != nil {
		if c.fds.Agent, err = listen(spec.Agent.Socket); err != nil {
			return nil, err
		}
	}
	open := func(path string) (int, error) {
		if !NeedsFD(path) {
			return 0, nil
		}
		f, err := os.Open(path)
		if err != nil {
			return 0, fmt.Errorf("open boot file: %w", err)
		}
		return c.add(f), nil
	}
	if spec.Boot.Kernel != "" {
		if c.fds.Kernel, err = open(spec.Boot.Kernel); err != nil {
			return nil, err
		}
	}
	if spec.Boot.Initrd != "" {
		if c.fds.Initrd, err = open(spec.Boot.Initrd); err != nil {
			return nil, err
		}
	}
	r.Success()
	return c, nil
}

// OpenLog opens (creating it with mode) a log for appending, never through a symlink: the run
// folder's owner is every launcher's user, and any of their processes may have planted one
// there pointing at another VM's disk. O_NONBLOCK keeps a planted FIFO from blocking the open;
// only a regular file is taken (else ErrUnsafePath). Equivalent to: test ! -L PATH && >>PATH
func OpenLog(path string, mode os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, mode)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s: %w", path, ErrUnsafePath)
	}
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrUnsafePath)
	}
	return f, nil
}

// removeAll removes paths in reverse creation order; a missing path is fine.
func removeAll(log *slog.Logger, paths []string) {
	for i := len(paths) - 1; i >= 0; i-- {
		if err := os.Remove(paths[i]); err != nil && !errors.Is(err, fs.ErrNotExist) && log != nil {
			log.Warn("remove runtime file", "path", paths[i], "err", err)
		}
	}
}

// blockDevices returns the ids of SATA disks whose path is a block device (they go on the
// command line and need the host_device driver).
func blockDevices(spec *Spec) (map[string]bool, error) {
	m := map[string]bool{}
	for _, d := range spec.Disks {
		if d.withDefaults().Bus != BusSATA {
			continue
		}
		isBlk, err := isBlockDevice(d.Path)
		if err != nil {
			return nil, err
		}
		m[d.ID] = isBlk
	}
	return m, nil
}

func isBlockDevice(path string) (bool, error) {
	st, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("stat disk: %w", err)
	}
	return st.Mode().Type() == fs.ModeDevice, nil
}

// privateDir creates a private folder for the QMP socket when StartOptions gives none.
func privateDir() (string, error) {
	d, err := os.MkdirTemp("", "vmlet-qemu-")
	if err != nil {
		return "", fmt.Errorf("create runtime folder: %w", err)
	}
	return d, nil
}

func qmpSocketIn(dir string) string { return filepath.Join(dir, "qmp.sock") }
