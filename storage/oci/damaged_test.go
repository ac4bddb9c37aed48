package oci

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

// TestDamagedEntryPulledAgain: a cached image whose file was truncated, or whose metadata
// names another digest, is not used: the next pull (IfNotPresent, which trusts the cache)
// unpacks it again and the file is whole.
func TestDamagedEntryPulledAgain(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	content := bytes.Repeat([]byte("vmlet"), 4000)
	img := storagetest.Image(t, storagetest.Layer(t,
		storagetest.File{Path: "/disk", Type: tar.TypeDir},
		storagetest.File{Path: "/disk/disk.img", Content: content}))
	ref := reg.Push(t, "vm/disk:v1", img)
	for name, damage := range map[string]func(t *testing.T, got *Image){
		"truncated file": func(t *testing.T, got *Image) {
			if err := os.Truncate(filepath.Join(got.Root, "disk/disk.img"), 100); err != nil {
				t.Fatal(err)
			}
		},
		"metadata of another digest": func(t *testing.T, got *Image) {
			p := filepath.Join(got.dir, metaFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			other := strings.Repeat("0", 64)
			if err := os.WriteFile(p, bytes.Replace(b, []byte(got.Digest), []byte("sha256:"+other), 1), 0o644); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCache(t)
			got, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
			if err != nil {
				t.Fatal(err)
			}
			damage(t, got)
			again, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
			if err != nil {
				t.Fatalf("pull after damage: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(again.Root, "disk/disk.img")); err != nil || !bytes.Equal(b, content) {
				t.Fatalf("disk after the second pull: %v (len %d, want %d)", err, len(b), len(content))
			}
			if again.Digest != got.Digest {
				t.Errorf("digest %s, want %s", again.Digest, got.Digest)
			}
		})
	}
}
