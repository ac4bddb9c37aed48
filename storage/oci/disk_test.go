package oci

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/vmlet/vmlet/storage/storagetest"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestContainerDisk: the disk is found, probed and accepted, or the image is refused with the
// right sentinel and ReasonInvalidContainerDisk.
func TestContainerDisk(t *testing.T) {
	prereq.QEMU(t)
	dir := t.TempDir()
	good := qcow2(t, "good.qcow2", "4M")
	raw := filepath.Join(dir, "raw.img")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	backed := filepath.Join(dir, "backed.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", "/etc/passwd", backed)
	relBacked := filepath.Join(dir, "relbacked.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", "base.qcow2", "-u", relBacked, "1M")
	dataFile := filepath.Join(dir, "datafile.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+filepath.Join(dir, "data.raw"), dataFile, "1M")
	vmdk := filepath.Join(dir, "disk.vmdk")
	qemuImg(t, "create", "-q", "-f", "vmdk", vmdk, "1M")

	disk := func(name, from string) F { return F{Path: "/disk/" + name, FromFile: from} }
	tests := []struct {
		name       string
		files      []F
		path       string
		wantFormat string
		target     error
	}{
		{"qcow2", []F{disk("d.qcow2", good)}, "", "qcow2", nil},
		{"raw", []F{disk("d.img", raw)}, "", "raw", nil},
		{"custom path", []F{{Path: "/custom/x.img", FromFile: raw}}, "/custom/x.img", "raw", nil},
		{"no disk folder", []F{{Path: "/other/x.img", FromFile: raw}}, "", "", ErrNoDisk},
		{"empty disk folder", []F{{Path: "/disk", Type: tar.TypeDir}}, "", "", ErrNoDisk},
		{"custom path missing", []F{disk("d.img", raw)}, "/custom/x.img", "", ErrNoDisk},
		{"custom path relative", []F{disk("d.img", raw)}, "disk/d.img", "", ErrNoDisk},
		{"two disks", []F{disk("a.img", raw), disk("b.img", raw)}, "", "", ErrMultipleDisks},
		{"disk and folder", []F{disk("a.img", raw), {Path: "/disk/sub", Type: tar.TypeDir}}, "", "", ErrMultipleDisks},
		{"disk and symlink", []F{disk("a.img", raw), {Path: "/disk/b", Type: tar.TypeSymlink, Linkname: "a.img"}}, "", "", ErrMultipleDisks},
		{"zero bytes", []F{{Path: "/disk/d.img"}}, "", "", ErrEmptyDisk},
		{"symlink", []F{{Path: "/disk/d.img", Type: tar.TypeSymlink, Linkname: "/etc/shadow"}}, "", "", ErrNoDisk},
		{"device", []F{{Path: "/disk/d.img", Type: tar.TypeBlock}}, "", "", ErrNoDisk},
		{"backing file", []F{disk("d.qcow2", backed)}, "", "", ErrBackingFile},
		{"backing file beside", []F{disk("d.qcow2", relBacked)}, "", "", ErrBackingFile},
		{"external data file", []F{disk("d.qcow2", dataFile)}, "", "", ErrBackingFile},
		{"vmdk", []F{disk("d.vmdk", vmdk)}, "", "", ErrUnsupportedFormat},
	}
	reg := storagetest.StartRegistry(t)
	c := newCache(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := reg.Push(t, "vm/check:latest", storagetest.Image(t, storagetest.Layer(t, tt.files...)))
			img, err := c.Pull(ctxT(t), ref, PullAlways)
			if err != nil {
				t.Fatal(err)
			}
			d, err := c.ContainerDisk(ctxT(t), img, tt.path)
			if tt.target != nil {
				if err == nil {
					t.Fatalf("accepted: %+v", d)
				}
				wantImageErr(t, err, ReasonInvalidContainerDisk, tt.target)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Format != tt.wantFormat || filepath.Dir(d.Path) == "" || d.VirtualSize <= 0 {
				t.Errorf("disk = %+v, want format %s", d, tt.wantFormat)
			}
			// The verdict is cached: a second call needs no qemu-img (it works without one).
			c2 := *c
			c2.o.QemuImg.Binary = "/nonexistent/qemu-img"
			if d2, err := c2.ContainerDisk(ctxT(t), img, tt.path); err != nil || *d2 != *d {
				t.Errorf("cached verdict: %+v, %v; want %+v", d2, err, d)
			}
		})
	}
}

// TestKernelBoot: kernel required, initrd optional, both must be non-empty regular files.
func TestKernelBoot(t *testing.T) {
	reg := storagetest.StartRegistry(t)
	c := newCache(t)
	kernel, initrd := []byte("bzImage"), []byte("cpio")
	tests := []struct {
		name           string
		files          []F
		kernel, initrd string
		target         error
	}{
		{"both", []F{{Path: "/boot/k", Content: kernel}, {Path: "/boot/i", Content: initrd}}, "/boot/k", "/boot/i", nil},
		{"kernel only", []F{{Path: "/boot/k", Content: kernel}}, "/boot/k", "", nil},
		{"no kernel path", []F{{Path: "/boot/k", Content: kernel}}, "", "", ErrKernelMissing},
		{"kernel missing", []F{{Path: "/boot/i", Content: initrd}}, "/boot/k", "/boot/i", ErrKernelMissing},
		{"kernel empty", []F{{Path: "/boot/k"}}, "/boot/k", "", ErrKernelMissing},
		{"kernel is a folder", []F{{Path: "/boot/k", Type: tar.TypeDir}}, "/boot/k", "", ErrKernelMissing},
		{"kernel symlink", []F{{Path: "/boot/k", Type: tar.TypeSymlink, Linkname: "/vmlinuz"}}, "/boot/k", "", ErrKernelMissing},
		{"kernel path escapes", []F{{Path: "/boot/k", Content: kernel}}, "/boot/../../k", "", ErrKernelMissing},
		{"initrd missing", []F{{Path: "/boot/k", Content: kernel}}, "/boot/k", "/boot/i", ErrInitrdMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref := reg.Push(t, "vm/kernel:latest", storagetest.Image(t, storagetest.Layer(t, tt.files...)))
			img, err := c.Pull(ctxT(t), ref, PullAlways)
			if err != nil {
				t.Fatal(err)
			}
			k, err := c.KernelBoot(img, tt.kernel, tt.initrd)
			if tt.target != nil {
				if err == nil {
					t.Fatalf("accepted: %+v", k)
				}
				wantImageErr(t, err, ReasonInvalidKernelBoot, tt.target)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(k.Kernel); err != nil || string(b) != string(kernel) {
				t.Errorf("kernel %s: %q, %v", k.Kernel, b, err)
			}
			if tt.initrd == "" && k.Initrd != "" {
				t.Errorf("initrd = %q, want none", k.Initrd)
			}
			if tt.initrd != "" {
				if b, err := os.ReadFile(k.Initrd); err != nil || string(b) != string(initrd) {
					t.Errorf("initrd %s: %q, %v", k.Initrd, b, err)
				}
			}
		})
	}
}
