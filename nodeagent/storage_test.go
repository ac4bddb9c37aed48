package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/cloudinit"
)

func TestParseImageSource(t *testing.T) {
	ref, src, err := ParseImageSource("vmlet.dev/testguest:latest=oci:/var/cache/guest:latest")
	if err != nil || ref != "vmlet.dev/testguest:latest" || src != "oci:/var/cache/guest:latest" {
		t.Fatalf("got %q %q %v", ref, src, err)
	}
	for _, bad := range []string{"vmlet.dev/testguest:latest", "vmlet.dev/x:1=/plain/dir", "Bad Ref=oci:/d:1"} {
		if _, _, err := ParseImageSource(bad); !errors.Is(err, ErrBadFlag) {
			t.Errorf("%q: err = %v, want ErrBadFlag", bad, err)
		}
	}
}

func TestParseClaim(t *testing.T) {
	dir := t.TempDir()
	name, c, err := ParseClaim("data=" + dir)
	if err != nil || name != "data" || c != (storage.Claim{Path: dir, Mode: storage.Filesystem}) {
		t.Fatalf("folder claim: %q %+v %v", name, c, err)
	}
	if name, _, err = ParseClaim("team-a/data=" + dir); err != nil || name != "team-a/data" {
		t.Fatalf("namespaced claim: %q %v", name, err)
	}
	// /dev/loop-control is a char device; a block device is found by mode, e.g. /dev/loop0.
	if _, c, err := ParseClaim("blk=/dev/loop0"); err == nil && c.Mode != storage.Block {
		t.Errorf("/dev/loop0 is not a Block claim: %+v", c)
	}
	file := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"data", "=" + dir, "data=relative/dir", "data=" + dir + "/../x", "data=" + file, "data=/dev/null"} {
		if _, _, err := ParseClaim(bad); !errors.Is(err, ErrBadFlag) {
			t.Errorf("%q: err = %v, want ErrBadFlag", bad, err)
		}
	}
	if _, _, err := ParseClaim("data=" + filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing folder: err = %v, want ErrNotExist", err)
	}
}

// TestCleanupVolumes: folders of VMIs that are gone are removed, those of existing VMIs and
// folders storage did not make stay.
func TestCleanupVolumes(t *testing.T) {
	root := t.TempDir()
	h := &storage.Host{}
	for _, id := range []string{"kept", "orphan"} {
		p, err := storage.Plan([]storage.Volume{{Name: "ci", CloudInitNoCloud: &cloudinit.Source{UserData: "#cloud-config\n"}}}, nil,
			storage.Options{VMDir: filepath.Join(root, id), InstanceID: id + ".default"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Apply(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	foreign := filepath.Join(root, "foreign")
	if err := os.MkdirAll(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "data"), []byte("not storage's"), 0o644); err != nil {
		t.Fatal(err)
	}
	removed, err := cleanupVolumes(root, map[string]bool{"kept": true})
	if !errors.Is(err, storage.ErrNotStorageDir) {
		t.Errorf("err = %v, want the foreign folder refused", err)
	}
	if len(removed) != 1 || removed[0] != filepath.Join(root, "orphan") {
		t.Errorf("removed %v, want the orphan only", removed)
	}
	for _, dir := range []string{"kept", "foreign"} {
		if _, err := os.Stat(filepath.Join(root, dir)); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
	if removed, err := cleanupVolumes(filepath.Join(root, "missing"), nil); err != nil || removed != nil {
		t.Errorf("missing root: %v %v", removed, err)
	}
}
