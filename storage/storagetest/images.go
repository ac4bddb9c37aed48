package storagetest

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmlet/vmlet/test/assets/images"
)

// Paths of the kernel and initrd in KernelBoot images.
const (
	KernelPath = "/boot/vmlinuz"
	InitrdPath = "/boot/initrd.img"
)

// File is one tar entry of a test layer (images.File).
type File = images.File

// Layer builds a gzip tar layer of files, in order (images.Layer).
func Layer(tb testing.TB, files ...File) v1.Layer {
	tb.Helper()
	l, err := images.Layer(files...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// Image stacks layers on an empty image.
func Image(tb testing.TB, layers ...v1.Layer) v1.Image {
	tb.Helper()
	img, err := images.Image(layers...)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// ContainerDisk is a KubeVirt containerDisk: the host file disk as /disk/<its name>.
func ContainerDisk(tb testing.TB, disk string) v1.Image {
	tb.Helper()
	img, err := images.ContainerDisk(disk)
	if err != nil {
		tb.Fatal(err)
	}
	return img
}

// KernelBoot is a KubeVirt kernelBoot image: kernel at KernelPath, initrd (if not empty) at
// InitrdPath.
func KernelBoot(tb testing.TB, kernel, initrd string) v1.Image {
	tb.Helper()
	img, err := images.KernelBoot(kernel, KernelPath, initrd, InitrdPath)
	if err != nil {
		tb.Fatal(err)
	}
	return img
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
	ref, err := images.WriteLayout(dir, img, tag)
	if err != nil {
		tb.Fatal(err)
	}
	return ref
}
