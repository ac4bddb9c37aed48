package qemuimg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultBinary is the qemu-img found on PATH.
const DefaultBinary = "qemu-img"

// Limits applied to `qemu-img info` (the same defence KubeVirt uses against images crafted to
// make the parser allocate or spin without bound).
const (
	infoAddressSpace = 1 << 30 // bytes
	infoCPUSeconds   = 10
)

// ErrNotAbsolute means a path given to qemu-img was not an absolute clean path.
var ErrNotAbsolute = errors.New("path is not absolute and clean")

// Error is a failed qemu-img run: its arguments, exit error and standard error.
type Error struct {
	Args   []string
	Stderr string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("qemu-img %s: %v: %s", strings.Join(e.Args, " "), e.Err, strings.TrimSpace(e.Stderr))
}

func (e *Error) Unwrap() error { return e.Err }

// Tool runs one qemu-img binary. The zero value uses DefaultBinary.
type Tool struct {
	Binary string
}

func (t Tool) binary() string {
	if t.Binary == "" {
		return DefaultBinary
	}
	return t.Binary
}

// Info is the part of `qemu-img info --output=json` vmlet relies on.
type Info struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	ActualSize      int64  `json:"actual-size"`
	BackingFilename string `json:"backing-filename"`
	BackingFormat   string `json:"backing-filename-format"`
	FormatSpecific  struct {
		Type string `json:"type"`
		Data struct {
			DataFile string `json:"data-file"`
			Corrupt  bool   `json:"corrupt"`
		} `json:"data"`
	} `json:"format-specific"`
}

// Info inspects the image at path without opening its backing file, letting qemu-img probe the
// format, under an address-space and CPU-time limit. It shares the image with a QEMU that has it
// open (-U): the header fields read here do not change while a guest writes.
//
// Equivalent to: prlimit --as=1G --cpu=10 qemu-img info -U --output=json PATH
func (t Tool) Info(ctx context.Context, path string) (*Info, error) {
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("inspect image: %w", err)
	}
	out, err := t.run(ctx, true, "info", "-U", "--output=json", path)
	if err != nil {
		return nil, fmt.Errorf("inspect image %s: %w", path, err)
	}
	var info Info
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("inspect image %s: decode qemu-img output: %w", path, err)
	}
	return &info, nil
}

// CreateOptions describe a new qcow2 image: either SizeBytes for an empty one, or a backing file
// (with its format, never probed) for an overlay whose size is the backing file's.
type CreateOptions struct {
	SizeBytes     int64
	Backing       string
	BackingFormat string // "raw" or "qcow2"; required with Backing
}

// CreateQCOW2 creates a qcow2 image at path, which must not exist (qemu-img itself would
// overwrite it: the name is claimed with O_EXCL first, and removed again if qemu-img fails).
// Empty images are sparse: only metadata is allocated.
//
// Equivalent to: qemu-img create -q -f qcow2 [-F FMT -b BACKING] PATH [SIZE]
func (t Tool) CreateQCOW2(ctx context.Context, path string, o CreateOptions) error {
	if err := checkPath(path); err != nil {
		return fmt.Errorf("create image: %w", err)
	}
	var opts, tail []string // qemu-img create -q -f qcow2 OPTS FILE TAIL
	switch {
	case o.Backing != "":
		if err := checkPath(o.Backing); err != nil {
			return fmt.Errorf("create overlay %s: backing: %w", path, err)
		}
		if o.BackingFormat != "raw" && o.BackingFormat != "qcow2" {
			return fmt.Errorf("create overlay %s: backing format %q: %w", path, o.BackingFormat, errors.ErrUnsupported)
		}
		opts = []string{"-F", o.BackingFormat, "-b", o.Backing}
	case o.SizeBytes > 0:
		tail = []string{strconv.FormatInt(o.SizeBytes, 10)}
	default:
		return fmt.Errorf("create image %s: size %d: %w", path, o.SizeBytes, errors.ErrUnsupported)
	}
	// The file is claimed here (O_EXCL: nothing that was there, a planted symlink included, is
	// used) and qemu-img gets the claimed file itself, /proc/<pid>/fd/<fd>, never the path
	// again: the folder may belong to the VM's user, who could swap the name for a symlink
	// between this open and qemu-img's.
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Errorf("create image: %w", err)
	}
	defer f.Close()
	file := "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd()))
	args := append(append(append([]string{"create", "-q", "-f", "qcow2"}, opts...), file), tail...)
	if _, err := t.run(ctx, false, args...); err != nil {
		os.Remove(path)
		return fmt.Errorf("create image %s: %w", path, err)
	}
	return nil
}

func (t Tool) run(ctx context.Context, limit bool, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, t.binary(), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, &Error{Args: args, Err: err}
	}
	if limit {
		// Set right after exec, before qemu-img has parsed its options, let alone the image.
		pid := cmd.Process.Pid
		errAS := unix.Prlimit(pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: infoAddressSpace, Max: infoAddressSpace}, nil)
		errCPU := unix.Prlimit(pid, unix.RLIMIT_CPU, &unix.Rlimit{Cur: infoCPUSeconds, Max: infoCPUSeconds}, nil)
		if err := errors.Join(errAS, errCPU); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, &Error{Args: args, Err: fmt.Errorf("set resource limits: %w", err)}
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, &Error{Args: args, Stderr: stderr.String(), Err: err}
	}
	return stdout.Bytes(), nil
}

func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q: %w", p, ErrNotAbsolute)
	}
	return nil
}
