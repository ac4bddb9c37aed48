package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
)

type F = storagetest.File

// tree lists every path under root with "/" for folders and the content for files.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel := "/" + strings.TrimPrefix(p, root+"/")
		if d.IsDir() {
			got[rel+"/"] = ""
			return nil
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s is a %v in the unpacked tree", rel, d.Type())
			return nil
		}
		b, err := os.ReadFile(p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestUnpackLayers: layers apply in order with whiteouts (plain and opaque), replacements,
// hard links as copies; symlinks and devices are skipped and recorded; names cannot leave the
// tree.
func TestUnpackLayers(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	l1 := storagetest.Layer(t,
		F{Path: "/disk/a.img", Content: []byte("a")},
		F{Path: "/etc/x", Content: []byte("x")},
		F{Path: "/opq/old", Content: []byte("old")},
		F{Path: "/file-then-dir", Content: []byte("f")},
		F{Path: "/link-then-file", Type: tar.TypeSymlink, Linkname: "/etc/x"},
		F{Path: "/dev/null", Type: tar.TypeChar},
	)
	l2 := storagetest.Layer(t,
		F{Path: "/disk/.wh.a.img"},
		F{Path: "/disk/b.img", Content: []byte("b")},
		F{Path: "/opq/.wh..wh..opq"},
		F{Path: "/opq/new", Content: []byte("new")},
		F{Path: "/file-then-dir/inner", Content: []byte("i")},
		F{Path: "/link-then-file", Content: []byte("now a file")},
		F{Path: "/hard", Type: tar.TypeLink, Linkname: "etc/x"},
		F{Path: "../../../escape", Content: []byte("inside")},
		F{Path: "/etc/passwd-link", Type: tar.TypeSymlink, Linkname: "/etc/passwd"},
	)
	ref := reg.Push(t, "vm/layers:v1", storagetest.Image(t, l1, l2))
	c := newCache(t)
	img, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/disk/": "", "/disk/b.img": "b", "/etc/": "", "/etc/x": "x", "/opq/": "", "/opq/new": "new",
		"/file-then-dir/": "", "/file-then-dir/inner": "i", "/link-then-file": "now a file",
		"/hard": "x", "/escape": "inside",
	}
	got := tree(t, img.Root)
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("%s = %q (present %v), want %q", p, g, ok, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected %s in the tree", p)
		}
	}
	meta, err := img.meta()
	if err != nil {
		t.Fatal(err)
	}
	var skipped []string
	for p, why := range meta.Skipped {
		skipped = append(skipped, p+" "+why)
	}
	sort.Strings(skipped)
	if want := []string{"/dev/null char device", "/etc/passwd-link symlink"}; strings.Join(skipped, ",") != strings.Join(want, ",") {
		t.Errorf("skipped = %v, want %v", skipped, want)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(c.Dir()), "escape")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a ../ entry escaped the tree: %v", err)
	}
}

// TestUnpackSparse: zero chunks of a raw disk become holes.
func TestUnpackSparse(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	content := make([]byte, 8<<20)
	copy(content[3<<20:], "data in the middle")
	ref := reg.Push(t, "vm/sparse:v1", storagetest.Image(t, storagetest.Layer(t, F{Path: "/disk/raw.img", Content: content})))
	img, err := newCache(t).Pull(ctxT(t), ref, PullIfNotPresent)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(img.Root, "disk/raw.img")
	b, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(b, content) {
		t.Fatalf("content differs: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 2<<20 {
		t.Errorf("8 MiB raw image with one non-zero chunk uses %d bytes on disk, want <= 2 MiB", used)
	}
}

// TestUnpackLimits: an image over MaxImageBytes is refused and leaves nothing behind.
func TestUnpackLimits(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	ref := reg.Push(t, "vm/big:v1", storagetest.Image(t, storagetest.Layer(t, F{Path: "/disk/raw.img", Content: make([]byte, 4<<20)})))
	c := newCache(t, func(o *Options) { o.MaxImageBytes = 1 << 20 })
	_, err := c.Pull(ctxT(t), ref, PullIfNotPresent)
	wantImageErr(t, err, ReasonInvalidImage, ErrTooLarge)
	if ents := cacheEntries(t, c, "images"); len(ents) != 0 {
		t.Errorf("images/ holds %v", ents)
	}
}
