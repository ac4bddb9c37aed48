package controllers_test

import (
	"archive/tar"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/hostile"
	"github.com/vmlet/vmlet/test/testguest"
)

// hostileImage builds the image fixture name (hostile.Fixtures says what each holds).
func hostileImage(t *testing.T, name string) v1.Image {
	t.Helper()
	dir := func(p string) images.File { return images.File{Path: p, Type: tar.TypeDir} }
	disk := func(f images.File) []images.File { return []images.File{dir("/disk"), f} }
	var files []images.File
	switch name {
	case "nodisk":
		files = []images.File{dir("/etc"), {Path: "/etc/hostname", Content: []byte("nodisk\n")}}
	case "twodisks":
		files = []images.File{dir("/disk"), {Path: "/disk/a.img", Content: make([]byte, 4096)}, {Path: "/disk/b.img", Content: make([]byte, 4096)}}
	case "emptydisk":
		files = disk(images.File{Path: "/disk/disk.img"})
	case "symlink-escape":
		files = disk(images.File{Path: "/disk/disk.img", Type: tar.TypeSymlink, Linkname: "../../../../etc/shadow"})
	case "devicefile":
		files = disk(images.File{Path: "/disk/disk.img", Type: tar.TypeChar})
	case "hardlink-escape":
		files = disk(images.File{Path: "/disk/disk.img", Type: tar.TypeLink, Linkname: "/etc/shadow"})
	case "notadisk":
		files = disk(images.File{Path: "/disk/disk.img", Content: []byte("hello, world\n")})
	case "backingfile":
		q := filepath.Join(t.TempDir(), "backing.qcow2")
		out, err := exec.CommandContext(context.Background(), "qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", "/etc/shadow", "-F", "raw", q, "1M").CombinedOutput()
		if err != nil {
			t.Fatalf("qemu-img create: %v: %s", err, out)
		}
		files = disk(images.File{Path: "/disk/disk.qcow2", FromFile: q})
	case "sparse10g":
		files = nil // SparseLayer below
	case "nokernel", "kernelonly":
		g := testguest.Assets(t)
		files = []images.File{{Path: guestvmi.InitrdPath, FromFile: g.Initrd}}
		if name == "kernelonly" {
			files = []images.File{{Path: guestvmi.KernelPath, FromFile: g.Kernel}}
		}
	default:
		t.Fatalf("no builder for hostile fixture %q (%s)", name, hostile.Fixtures[name])
	}
	var l v1.Layer
	var err error
	if name == "sparse10g" {
		l, err = images.SparseLayer("/disk/disk.img", 10<<30, []byte("sparse"))
	} else {
		l, err = images.Layer(files...)
	}
	if err != nil {
		t.Fatal(err)
	}
	img, err := images.Image(l)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// hostileSources writes the fixtures the cases name as OCI layouts and maps each case's image
// reference to its layout.
func hostileSources(t *testing.T, cases []*hostile.Case) map[string]string {
	t.Helper()
	root := t.TempDir()
	layouts := map[string]string{}
	sources := map[string]string{}
	for _, c := range cases {
		for ref, fixture := range c.Images {
			if _, ok := layouts[fixture]; !ok {
				l, err := images.WriteLayout(filepath.Join(root, fixture), hostileImage(t, fixture), "1")
				if err != nil {
					t.Fatal(err)
				}
				layouts[fixture] = l
			}
			sources[ref] = layouts[fixture]
		}
	}
	return sources
}

// hostileDiskRoot is the agent's hostDisk root with the files the cases name: disk.img,
// shared.img and shared2.img (1 MiB raw), link-in → disk.img, link-shared2 → shared2.img,
// link-out → /etc/shadow, dir/ (a folder).
func hostileDiskRoot(t *testing.T) string {
	t.Helper()
	root := nodeDir(t)
	for _, f := range []string{"disk.img", "shared.img", "shared2.img"} {
		if err := os.WriteFile(filepath.Join(root, f), make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"link-in": "disk.img", "link-shared2": "shared2.img", "link-out": "/etc/shadow"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o755); err != nil {
		t.Fatal(fmt.Errorf("host disk root: %w", err))
	}
	return root
}
