package imagebuild

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReproducible builds the same spec twice from host files whose owner and times differ
// between the builds: the digests and the archive bytes must not change; another epoch must.
func TestReproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho hi\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := base()
	spec.Ref = "vmlet.dev/test:dev"
	spec.Files = append(spec.Files, File{Source: bin, Path: "/usr/bin/prog", Mode: 0o755})
	spec.Entrypoint = []string{"/usr/bin/prog"}
	spec.User = "107:107"

	build := func(epoch time.Time) (string, []byte) {
		t.Helper()
		img, err := Build(spec, epoch)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "img.tar")
		if err := WriteArchive(out, spec.Ref, img); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return d.String(), b
	}
	epoch := time.Unix(0, 0)
	d1, a1 := build(epoch)
	// Change what a careless builder would leak: the host file's times and owner.
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(bin, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	d2, a2 := build(epoch)
	if d1 != d2 || !bytes.Equal(a1, a2) {
		t.Errorf("rebuild changed the image: %s then %s (archives equal: %v)", d1, d2, bytes.Equal(a1, a2))
	}
	if d3, _ := build(time.Unix(1700000000, 0)); d3 == d1 {
		t.Errorf("another SOURCE_DATE_EPOCH gave the same digest %s", d3)
	}
}

// TestLayerEntries checks the layer's tar headers: sorted, owner 0:0 without names, the epoch,
// modes as planned (sticky included).
func TestLayerEntries(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("content"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := base()
	spec.Files = append(spec.Files, File{Source: src, Path: "/usr/bin/f", Mode: 0o755})
	entries, err := Plan(spec)
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1234, 0)
	l, err := Layer(entries, epoch)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	modes := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: owner %d:%d (%q:%q) mtime %v; want 0:0 unnamed at %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, epoch)
		}
		names = append(names, h.Name)
		modes[h.Name] = h.Mode
		if h.Name == "usr/bin/f" {
			b, _ := io.ReadAll(tr)
			if string(b) != "content" {
				t.Errorf("usr/bin/f holds %q", b)
			}
		}
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("entries not sorted: %q before %q", names[i-1], names[i])
		}
	}
	if modes["tmp/"] != 0o1777 || modes["usr/bin/f"] != 0o755 || modes["etc/passwd"] != 0o644 {
		t.Errorf("modes: tmp/ %o, usr/bin/f %o, etc/passwd %o; want 1777, 755, 644", modes["tmp/"], modes["usr/bin/f"], modes["etc/passwd"])
	}
}
