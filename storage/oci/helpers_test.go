package oci

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
)

const testTimeout = 60 * time.Second

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newCache(t testing.TB, mutate ...func(*Options)) *Cache {
	t.Helper()
	o := Options{Dir: filepath.Join(t.TempDir(), "cache")}
	// Runs before TempDir's own cleanup: the cache's read-only folders (0555) would make it
	// fail for any user without CAP_DAC_OVERRIDE.
	t.Cleanup(func() { _ = forceRemoveAll(o.Dir) })
	for _, m := range mutate {
		m(&o)
	}
	c, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// qemuImg runs qemu-img with args (creating test images).
func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	prereq.QEMU(t)
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %v: %v: %s", args, err, out)
	}
}

// qcow2 creates an empty qcow2 of size (qemu-img syntax, e.g. "1M") in a temp dir.
func qcow2(t testing.TB, name, size string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	qemuImg(t, "create", "-q", "-f", "qcow2", p, size)
	return p
}

// wantImageErr checks err is an *ImageError with reason and wrapping target.
func wantImageErr(t testing.TB, err error, reason Reason, target error) {
	t.Helper()
	ie, ok := errors.AsType[*ImageError](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *ImageError", err, err)
	}
	if ie.Reason != reason {
		t.Errorf("reason = %s, want %s (error: %v)", ie.Reason, reason, err)
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("error %v does not wrap %v", err, target)
	}
}

// cacheEntries lists the names in a cache subfolder.
func cacheEntries(t testing.TB, c *Cache, sub string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(c.Dir(), sub))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// pushDisk pushes a containerDisk holding an empty qcow2 of size and returns its reference and
// digest.
func pushDisk(t testing.TB, reg *storagetest.Registry, repoTag, size string) (string, string) {
	t.Helper()
	img := storagetest.ContainerDisk(t, qcow2(t, "disk.qcow2", size))
	return reg.Push(t, repoTag, img), storagetest.Digest(t, img)
}
