package storagetest

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Paths of the kernel and initrd in KernelBoot images.
const (
	KernelPath = "/boot/vmlinuz"
	InitrdPath = "/boot/initrd.img"
)

// File is one tar entry of a test layer.
type File struct {
	Path     string // inside the image, e.g. "/disk/disk.qcow2"
	Content  []byte
	FromFile string // host file whose content is used instead of Content
	Type     byte   // tar type flag; 0 means a regular file (tar.TypeReg)
	Linkname string // for symlinks and hard links
}

// Layer builds a gzip tar layer of files, in order. Regular files are owned by 107:107 (QEMU's
// uid in KubeVirt's containerDisks), like `ADD --chown=107:107`.
func Layer(tb testing.TB, files ...File) v1.Layer {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		content := f.Content
		if f.FromFile != "" {
			b, err := os.ReadFile(f.FromFile)
			if err != nil {
				tb.Fatalf("read layer file: %v", err)
			}
			content = b
		}
		hdr := &tar.Header{Name: strings.TrimPrefix(f.Path, "/"), Typeflag: f.Type, Linkname: f.Linkname,
			Mode: 0o644, Uid: 107, Gid: 107}
		switch f.Type {
		case 0, tar.TypeReg:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(content))
		case tar.TypeDir:
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			tb.Fatalf("write tar header %s: %v", f.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(content); err != nil {
				tb.Fatalf("write tar entry %s: %v", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatalf("close tar: %v", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		tb.Fatalf("build layer: %v", err)
	}
	return l
}

// Image stacks layers on an empty image.
func Image(tb testing.TB, layers ...v1.Layer) v1.Image {
	tb.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		tb.Fatalf("build image: %v", err)
	}
	return img
}

// ContainerDisk is a KubeVirt containerDisk: the host file disk as /disk/<its name>.
func ContainerDisk(tb testing.TB, disk string) v1.Image {
	tb.Helper()
	return Image(tb, Layer(tb,
		File{Path: "/disk", Type: tar.TypeDir},
		File{Path: path.Join("/disk", filepath.Base(disk)), FromFile: disk}))
}

// KernelBoot is a KubeVirt kernelBoot image: kernel at KernelPath, initrd (if not empty) at
// InitrdPath.
func KernelBoot(tb testing.TB, kernel, initrd string) v1.Image {
	tb.Helper()
	files := []File{{Path: "/boot", Type: tar.TypeDir}, {Path: KernelPath, FromFile: kernel}}
	if initrd != "" {
		files = append(files, File{Path: InitrdPath, FromFile: initrd})
	}
	return Image(tb, Layer(tb, files...))
}

// Digest is img's manifest digest ("sha256:…").
func Digest(tb testing.TB, img v1.Image) string {
	tb.Helper()
	h, err := img.Digest()
	if err != nil {
		tb.Fatalf("image digest: %v", err)
	}
	return h.String()
}

// WriteLayout writes img into a new OCI layout folder dir, named tag (the
// org.opencontainers.image.ref.name annotation), and returns the reference "oci:DIR:TAG".
func WriteLayout(tb testing.TB, dir string, img v1.Image, tag string) string {
	tb.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		tb.Fatalf("write layout: %v", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag})); err != nil {
		tb.Fatalf("write layout image: %v", err)
	}
	return "oci:" + dir + ":" + tag
}
