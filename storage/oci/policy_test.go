package oci

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]PullPolicy{
		"quay.io/vm/disk":               PullAlways,
		"quay.io/vm/disk:latest":        PullAlways,
		"quay.io/vm/disk:v1":            PullIfNotPresent,
		"disk@sha256:" + hex64:          PullIfNotPresent,
		"oci:/images/x":                 PullAlways,
		"oci:/images/x:v2":              PullIfNotPresent,
		"oci:/images/x@sha256:" + hex64: PullIfNotPresent,
		"Not A Reference":               PullIfNotPresent,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseSource(t *testing.T) {
	tests := []struct {
		in, key string
		bad     bool
	}{
		{in: "disk", key: "index.docker.io/library/disk:latest"},
		{in: "127.0.0.1:5000/vm/disk:v1", key: "127.0.0.1:5000/vm/disk:v1"},
		{in: "quay.io/vm/disk@sha256:" + hex64, key: "quay.io/vm/disk@sha256:" + hex64},
		{in: "oci:/var/images/x", key: "oci:/var/images/x:"},
		{in: "oci:/var/images/x:v1", key: "oci:/var/images/x:v1"},
		{in: "oci:/var/images/x@sha256:" + hex64, key: "oci:/var/images/x@sha256:" + hex64},
		{in: "oci:/var/images/x:", bad: true},
		{in: "oci:/var/../x", bad: true},
		{in: "oci:x", bad: true},
		{in: "oci:/x@sha256:short", bad: true},
		{in: "quay.io/vm/disk@sha256:short", bad: true},
		{in: "a b", bad: true},
		{in: "", bad: true},
	}
	for _, tt := range tests {
		s, err := parseSource(tt.in)
		if tt.bad {
			if err == nil || !errors.Is(err, ErrInvalidReference) {
				t.Errorf("parseSource(%q) = %+v, %v; want ErrInvalidReference", tt.in, s, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseSource(%q): %v", tt.in, err)
			continue
		}
		if got := strings.TrimSuffix(s.key(newCache(t).platform), " linux/amd64"); got != tt.key {
			t.Errorf("parseSource(%q).key = %q, want %q", tt.in, got, tt.key)
		}
	}
}

// TestPullConcurrentProcesses: processes sharing a cache folder download an image once (the
// flock is what serialises them, not a mutex).
func TestPullConcurrentProcesses(t *testing.T) {
	if dir := os.Getenv("VMLET_OCI_HELPER_DIR"); dir != "" {
		c, err := Open(Options{Dir: dir})
		if err == nil {
			_, err = c.Pull(context.Background(), os.Getenv("VMLET_OCI_HELPER_REF"), PullIfNotPresent)
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	reg := storagetest.StartRegistry(t)
	ref, digest := pushDisk(t, reg, "vm/disk:v1", "1M")
	dir := filepath.Join(t.TempDir(), "cache")
	ctx := ctxT(t)
	var cmds []*exec.Cmd
	for range 4 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPullConcurrentProcesses$")
		cmd.Env = append(os.Environ(), "VMLET_OCI_HELPER_DIR="+dir, "VMLET_OCI_HELPER_REF="+ref)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper process: %v", err)
		}
	}
	if n := reg.Gets("blobs"); n != 2 {
		t.Errorf("4 processes fetched %d blobs, want 2 (config + layer once)", n)
	}
	c, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if img, err := c.Pull(ctx, ref, PullNever); err != nil || img.Digest != digest {
		t.Errorf("cache after the helpers: %v, %+v", err, img)
	}
}

// TestRemove: a removed image is pulled again; removing twice is fine.
func TestRemove(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	ref, digest := pushDisk(t, reg, "vm/disk:v1", "1M")
	c := newCache(t)
	ctx := ctxT(t)
	img, err := c.Pull(ctx, ref, PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := c.Remove(ctx, digest); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(img.Root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image still on disk: %v", err)
	}
	if _, err := c.Pull(ctx, ref, PullNever); !errors.Is(err, ErrNotPresent) {
		t.Errorf("Never after Remove: %v", err)
	}
	if _, err := c.Pull(ctx, ref, PullIfNotPresent); err != nil {
		t.Errorf("IfNotPresent after Remove: %v", err)
	}
}

func TestPin(t *testing.T) {
	d := "sha256:" + hex64
	for in, want := range map[string]string{
		"quay.io/vm/disk:v1":         "quay.io/vm/disk@" + d,
		"disk":                       "index.docker.io/library/disk@" + d,
		"oci:/img/x:v1":              "oci:/img/x@" + d,
		"oci:/img/x@sha256:" + hex64: "oci:/img/x@" + d,
	} {
		if got, err := Pin(in, d); err != nil || got != want {
			t.Errorf("Pin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Pin("quay.io/vm/disk:v1", "sha256:short"); !errors.Is(err, ErrInvalidReference) {
		t.Errorf("Pin with a bad digest: %v", err)
	}
}
