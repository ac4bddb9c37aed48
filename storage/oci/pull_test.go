package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

// TestPullFromRegistry: a pull over the registry protocol unpacks the image, read-only, under
// its manifest digest, with the file content intact.
func TestPullFromRegistry(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	content := bytes.Repeat([]byte("vmlet"), 1000)
	img := storagetest.Image(t, storagetest.Layer(t,
		storagetest.File{Path: "/disk", Type: tar.TypeDir},
		storagetest.File{Path: "/disk/disk.img", Content: content}))
	ref := reg.Push(t, "vm/disk:v1", img)
	c := newCache(t)
	got, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	if want := storagetest.Digest(t, img); got.Digest != want {
		t.Errorf("digest = %s, want %s", got.Digest, want)
	}
	b, err := os.ReadFile(filepath.Join(got.Root, "disk/disk.img"))
	if err != nil || !bytes.Equal(b, content) {
		t.Fatalf("unpacked disk: %v (len %d, want %d)", err, len(b), len(content))
	}
	for p, want := range map[string]os.FileMode{got.Root: 0o555, filepath.Join(got.Root, "disk"): 0o555,
		filepath.Join(got.Root, "disk/disk.img"): 0o444} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, %v; want %v", p, fi.Mode().Perm(), err, want)
		}
	}
	if tmp := cacheEntries(t, c, "tmp"); len(tmp) != 0 {
		t.Errorf("tmp holds %v after a pull", tmp)
	}
}

// TestPullPolicies: IfNotPresent and Never work offline once pulled; Always asks the registry
// for the manifest each time, downloads only new digests, and fails when the registry is gone.
func TestPullPolicies(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	ref, digest := pushDisk(t, reg, "vm/disk:v1", "1M")
	c := newCache(t)
	ctx := ctxT(t)

	if _, err := c.Pull(ctx, ref, PullNever); err == nil {
		t.Fatal("Never pulled an absent image")
	} else {
		wantImageErr(t, err, ReasonErrImageNeverPull, ErrNotPresent)
	}
	if reg.Gets("manifests") != 0 {
		t.Fatalf("Never contacted the registry")
	}
	img, err := c.Pull(ctx, ref, PullIfNotPresent)
	if err != nil || img.Digest != digest {
		t.Fatalf("IfNotPresent: %v, %+v", err, img)
	}
	manifests, blobs := reg.Gets("manifests"), reg.Gets("blobs")
	if blobs != 2 { // config + one layer
		t.Errorf("first pull fetched %d blobs, want 2", blobs)
	}
	if _, err := c.Pull(ctx, ref, PullIfNotPresent); err != nil {
		t.Fatal(err)
	}
	if reg.Gets("manifests") != manifests || reg.Gets("blobs") != blobs {
		t.Errorf("IfNotPresent on a cached image contacted the registry")
	}
	if _, err := c.Pull(ctx, ref, PullAlways); err != nil {
		t.Fatal(err)
	}
	if reg.Gets("manifests") != manifests+1 || reg.Gets("blobs") != blobs {
		t.Errorf("Always on an unchanged tag: manifests %d→%d, blobs %d→%d; want +1, +0",
			manifests, reg.Gets("manifests"), blobs, reg.Gets("blobs"))
	}

	// The tag moves: Always follows it, and IfNotPresent then uses the new digest.
	ref2, digest2 := pushDisk(t, reg, "vm/disk:v1", "2M")
	if ref2 != ref || digest2 == digest {
		t.Fatalf("re-push did not move the tag: %s %s", digest, digest2)
	}
	if img, err := c.Pull(ctx, ref, PullIfNotPresent); err != nil || img.Digest != digest {
		t.Fatalf("IfNotPresent after the tag moved: %v, %+v (want the cached %s)", err, img, digest)
	}
	if img, err := c.Pull(ctx, ref, PullAlways); err != nil || img.Digest != digest2 {
		t.Fatalf("Always after the tag moved: %v, %+v (want %s)", err, img, digest2)
	}

	// Registry gone: cached references still work unless the policy is Always.
	reg.Close()
	for _, p := range []PullPolicy{PullIfNotPresent, PullNever} {
		if img, err := c.Pull(ctx, ref, p); err != nil || img.Digest != digest2 {
			t.Errorf("%s offline: %v, %+v", p, err, img)
		}
	}
	if img, err := c.Pull(ctx, ref[:len(ref)-len(":v1")]+"@"+digest, PullNever); err != nil || img.Digest != digest {
		t.Errorf("Never by digest offline: %v, %+v", err, img)
	}
	_, err = c.Pull(ctx, ref, PullAlways)
	wantImageErr(t, err, ReasonErrImagePull, nil)
}

// TestPullErrors: each way a pull fails has its reason; a failed pull leaves nothing behind.
func TestPullErrors(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	img := storagetest.ContainerDisk(t, qcow2(t, "disk.qcow2", "1M"))
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.Push(t, "vm/disk:v1", img)
	byDigest := reg.Host + "/vm/disk@" + storagetest.Digest(t, img)
	tests := []struct {
		name    string
		ref     string
		corrupt string
		reason  Reason
		target  error
	}{
		{"empty", "", "", ReasonInvalidImageName, ErrInvalidReference},
		{"bad name", "UPPER/case:tag", "", ReasonInvalidImageName, ErrInvalidReference},
		{"bad layout path", "oci:relative/dir", "", ReasonInvalidImageName, ErrInvalidReference},
		{"unknown tag", reg.Host + "/vm/disk:nope", "", ReasonErrImagePull, ErrNotFound},
		{"unknown repo", reg.Host + "/vm/none:v1", "", ReasonErrImagePull, ErrNotFound},
		{"no registry", "127.0.0.1:1/vm/disk:v1", "", ReasonErrImagePull, nil},
		{"corrupt layer", ref, m.Layers[0].Digest.String(), ReasonDigestMismatch, ErrDigestMismatch},
		{"corrupt config", ref, m.Config.Digest.String(), ReasonDigestMismatch, ErrDigestMismatch},
		{"corrupt manifest", byDigest, storagetest.Digest(t, img), ReasonDigestMismatch, ErrDigestMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.corrupt != "" {
				reg.Corrupt(tt.corrupt)
				t.Cleanup(func() { reg.Uncorrupt(tt.corrupt) })
			}
			c := newCache(t)
			_, err := c.Pull(ctxT(t), tt.ref, PullIfNotPresent)
			if err == nil {
				t.Fatal("pull succeeded")
			}
			wantImageErr(t, err, tt.reason, tt.target)
			for _, sub := range []string{"images", "tmp", "refs"} {
				if ents := cacheEntries(t, c, sub); len(ents) != 0 {
					t.Errorf("%s/ holds %v after a failed pull", sub, ents)
				}
			}
		})
	}
}

// TestPullConcurrent: goroutines pulling one image at once download it once and all get it.
func TestPullConcurrent(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	ref, digest := pushDisk(t, reg, "vm/disk:v1", "1M")
	c := newCache(t)
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			img, err := c.Pull(ctx, ref, PullIfNotPresent)
			if err == nil && img.Digest != digest {
				err = errors.New("wrong digest " + img.Digest)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := reg.Gets("blobs"); n != 2 {
		t.Errorf("8 concurrent pulls fetched %d blobs, want 2 (config + layer once)", n)
	}
}
