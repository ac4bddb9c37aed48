package images

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// DiskDir is where a containerDisk keeps its disk file (KubeVirt's convention).
const DiskDir = "/disk"

// RefNameAnnotation names an image inside an OCI layout (the "tag" of oci:DIR:TAG).
const RefNameAnnotation = "org.opencontainers.image.ref.name"

// File is one tar entry of a layer.
type File struct {
	Path     string // inside the image, e.g. "/disk/disk.qcow2"
	Content  []byte
	FromFile string // host file whose content is used instead of Content
	Type     byte   // tar type flag; 0 means a regular file (tar.TypeReg)
	Linkname string // for symlinks and hard links
}

// Layer builds a gzip tar layer of files, in order. Regular files are owned by 107:107 (QEMU's
// uid in KubeVirt's containerDisks), like `ADD --chown=107:107`.
func Layer(files ...File) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		content := f.Content
		if f.FromFile != "" {
			b, err := os.ReadFile(f.FromFile)
			if err != nil {
				return nil, fmt.Errorf("read layer file: %w", err)
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
			return nil, fmt.Errorf("write tar header %s: %w", f.Path, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := tw.Write(content); err != nil {
				return nil, fmt.Errorf("write tar entry %s: %w", f.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	return l, nil
}

// Image stacks layers on an empty image.
func Image(layers ...v1.Layer) (v1.Image, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	return img, nil
}

// ContainerDisk is a KubeVirt containerDisk: the host file disk as /disk/<its name>.
func ContainerDisk(disk string) (v1.Image, error) {
	return withParents(File{Path: path.Join(DiskDir, filepath.Base(disk)), FromFile: disk})
}

// KernelBoot is a KubeVirt kernelBoot image: the host file kernel at kernelPath and, unless
// initrd is empty, the host file initrd at initrdPath (absolute paths inside the image).
func KernelBoot(kernel, kernelPath, initrd, initrdPath string) (v1.Image, error) {
	files := []File{{Path: kernelPath, FromFile: kernel}}
	if initrd != "" {
		files = append(files, File{Path: initrdPath, FromFile: initrd})
	}
	return withParents(files...)
}

// withParents is an image of one layer holding files, preceded by their parent folders.
func withParents(files ...File) (v1.Image, error) {
	var all []File
	seen := map[string]bool{"/": true}
	for _, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("build image: path %q must be absolute and clean", f.Path)
		}
		var parents []string
		for d := path.Dir(f.Path); !seen[d]; d = path.Dir(d) {
			seen[d] = true
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			all = append(all, File{Path: d, Type: tar.TypeDir})
		}
		all = append(all, f)
	}
	l, err := Layer(all...)
	if err != nil {
		return nil, err
	}
	return Image(l)
}

// WriteLayout writes img into a new OCI layout folder dir (which must not exist or be empty),
// named tag, and returns the reference "oci:DIR:TAG" (dir made absolute).
func WriteLayout(dir string, img v1.Image, tag string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("write layout: %w", err)
	}
	if ents, err := os.ReadDir(abs); err == nil && len(ents) > 0 {
		return "", fmt.Errorf("write layout: %s is not empty", abs)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("write layout: %w", err)
	}
	p, err := layout.Write(abs, empty.Index)
	if err != nil {
		return "", fmt.Errorf("write layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefNameAnnotation: tag})); err != nil {
		return "", fmt.Errorf("write layout image: %w", err)
	}
	return "oci:" + abs + ":" + tag, nil
}
