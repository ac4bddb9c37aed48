package storage

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/qemuimg"
	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
)

const testTimeout = 90 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// env is a host (image cache in a temp folder) with a registry and folders for VMs, host disks
// and claims.
type env struct {
	host   *Host
	reg    *storagetest.Registry
	vmDir  string
	hdRoot string
	claims string
	dir    string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	prereq.QEMU(t)
	dir := t.TempDir()
	c, err := oci.Open(oci.Options{Dir: filepath.Join(dir, "cache")})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{host: &Host{Images: c}, reg: storagetest.StartRegistry(t), dir: dir,
		vmDir: filepath.Join(dir, "vms", "vm1"), hdRoot: filepath.Join(dir, "hostdisks"), claims: filepath.Join(dir, "claims")}
	for _, d := range []string{filepath.Dir(e.vmDir), e.hdRoot, e.claims} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *env) opts() Options {
	return Options{VMDir: e.vmDir, HostDiskRoot: e.hdRoot, InstanceID: "vm1.default", Hostname: "vm1", Claims: map[string]Claim{}}
}

// qcow2 makes a qcow2 of size bytes whose guest-visible content starts with text.
func qcow2(t testing.TB, dir, name string, size int64, text string) string {
	t.Helper()
	raw := filepath.Join(t.TempDir(), "raw")
	if err := os.WriteFile(raw, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(raw, size); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	run(t, "qemu-img", "convert", "-q", "-f", "raw", "-O", "qcow2", raw, p)
	return p
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
	return string(out)
}

func info(t testing.TB, p string) *qemuimg.Info {
	t.Helper()
	i, err := qemuimg.Tool{}.Info(ctxT(t), p)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// writeFile writes content to p, making its folder.
func writeFile(t testing.TB, p, content string) {
	t.Helper()
	mkdirAll(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdirAll(t testing.TB, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return !errors.Is(err, fs.ErrNotExist)
}

func inode(t testing.TB, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}
