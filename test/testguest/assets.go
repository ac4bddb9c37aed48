package testguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/test/prereq"
)

// Files are the built guest assets, all inside Dir (a cache folder shared by every test process
// on the machine: treat it as read-only).
type Files struct {
	Kernel   string // vmlinuz: the Debian cloud kernel, for -kernel
	Initrd   string // initramfs.gz: busybox /init, qemu-ga, modules, for -initrd
	DataDisk string // data.qcow2: 64 MiB, starts with DataDiskLabel; attach an Overlay of it
	Dir      string
}

// exitMissingTool is build.sh's exit status when a host tool is missing and cannot be installed.
const exitMissingTool = 3

// buildTimeout bounds a cold build (≈10 s here; apt downloads ≈35 MB).
const buildTimeout = 10 * time.Minute

var built struct {
	once    sync.Once
	files   Files
	missing string // a prerequisite is missing: skip (fail under CI)
	err     error
}

// Assets builds the test guest once per test process (test/assets/guest/build.sh, cached across
// processes, ~0 s when warm) and returns its files. A missing host tool skips the test (fails it
// under CI=true); a build error fails it with the script's output. Under -short (make unit) it
// skips the test before building anything.
func Assets(tb testing.TB) Files {
	tb.Helper()
	prereq.Short(tb, "the test guest")
	built.once.Do(func() { built.files, built.missing, built.err = build() })
	if built.missing != "" {
		prereq.Missing(tb, built.missing)
	}
	if built.err != nil {
		tb.Fatalf("build test guest: %v", built.err)
	}
	return built.files
}

// build runs build.sh; equivalent to `test/assets/guest/build.sh | tail -n1`.
func build() (Files, string, error) {
	if _, err := exec.LookPath("bash"); err != nil {
		return Files{}, "bash not on PATH (needed by test/assets/guest/build.sh)", nil
	}
	root, err := repoRoot()
	if err != nil {
		return Files{}, "", fmt.Errorf("find repo root: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "test/assets/guest/build.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() == exitMissingTool {
			return Files{}, strings.TrimSpace(stderr.String()), nil
		}
		return Files{}, "", fmt.Errorf("run build.sh: %w\n%s%s", err, stderr.String(), stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := lines[len(lines)-1]
	f := Files{
		Kernel:   filepath.Join(dir, "vmlinuz"),
		Initrd:   filepath.Join(dir, "initramfs.gz"),
		DataDisk: filepath.Join(dir, "data.qcow2"),
		Dir:      dir,
	}
	for _, p := range []string{f.Kernel, f.Initrd, f.DataDisk} {
		if _, err := os.Stat(p); err != nil {
			return Files{}, "", fmt.Errorf("check build.sh output: %w\n%s", err, stderr.String())
		}
	}
	return f, "", nil
}

// repoRoot finds the module root: from this source file's path when it is a real path (no
// -trimpath), else from `go env GOMOD` in the working directory (go test runs in the package).
func repoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Join(filepath.Dir(file), "..", "..")
		if _, err := os.Stat(filepath.Join(root, "test/assets/guest/build.sh")); err == nil {
			return root, nil
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("run go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run go env GOMOD: not inside the vmlet module")
	}
	return filepath.Dir(gomod), nil
}

// Overlay creates a throwaway qcow2 overlay backed by backing (e.g. Files.DataDisk) in
// tb.TempDir() and returns its path, so several VMs can use the shared data disk and write to
// it. Equivalent to `qemu-img create -f qcow2 -b BACKING -F qcow2 OVERLAY`.
func Overlay(tb testing.TB, backing string) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "overlay.qcow2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qemu-img", "create", "-q", "-f", "qcow2",
		"-b", backing, "-F", "qcow2", p).CombinedOutput()
	if err != nil {
		tb.Fatalf("create overlay of %s: %v: %s", backing, err, out)
	}
	return p
}
