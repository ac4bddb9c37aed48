package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

// TestPullLayout: OCI layouts by tag, by digest and alone; a tampered blob in the layout is a
// digest mismatch.
func TestPullLayout(t *testing.T) {
	img := storagetest.ContainerDisk(t, qcow2(t, "disk.qcow2", "1M"))
	digest := storagetest.Digest(t, img)
	dir := filepath.Join(t.TempDir(), "layout")
	ref := storagetest.WriteLayout(t, dir, img, "v1")
	c := newCache(t)
	ctx := ctxT(t)
	for _, r := range []string{ref, "oci:" + dir, "oci:" + dir + "@" + digest} {
		got, err := c.Pull(ctx, r, PullAlways)
		if err != nil || got.Digest != digest {
			t.Errorf("pull %s: %v, %+v", r, err, got)
		}
	}
	if _, err := c.Pull(ctx, "oci:"+dir+":v2", PullIfNotPresent); err == nil {
		t.Error("pulled a tag the layout does not have")
	} else {
		wantImageErr(t, err, ReasonErrImagePull, ErrNotFound)
	}
	if _, err := c.Pull(ctx, "oci:"+filepath.Join(dir, "none"), PullIfNotPresent); err == nil {
		t.Error("pulled from a missing layout")
	} else {
		wantImageErr(t, err, ReasonErrImagePull, ErrNotFound)
	}

	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, blob := range []string{m.Layers[0].Digest.Hex, m.Config.Digest.Hex, m.Layers[0].Digest.Hex[:0] + digest[len("sha256:"):]} {
		t.Run("tampered "+blob[:12], func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "layout")
			ref := storagetest.WriteLayout(t, dir, img, "v1")
			p := filepath.Join(dir, "blobs", "sha256", blob)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0xff
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = newCache(t).Pull(ctxT(t), ref, PullIfNotPresent)
			wantImageErr(t, err, ReasonDigestMismatch, ErrDigestMismatch)
		})
	}
}
