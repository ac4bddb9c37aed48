package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/vmlet/vmlet/test/assets/images"
)

func main() {
	guest := flag.String("guest", "", "test guest build folder (vmlinuz, initramfs.gz): the output of test/assets/guest/build.sh")
	out := flag.String("out", "", "OCI layout folder to write")
	tag := flag.String("tag", "latest", "name of the image in the layout")
	kernelPath := flag.String("kernel-path", "/vmlinuz", "kernel's path in the image")
	initrdPath := flag.String("initrd-path", "/initramfs.gz", "initrd's path in the image")
	disk := flag.String("disk", "", "write a containerDisk of this disk image (qcow2 or raw) instead of a kernelBoot image")
	flag.Parse()
	if (*guest == "") == (*disk == "") || *out == "" {
		fmt.Fprintln(os.Stderr, "guestimage: --out and one of --guest and --disk are required")
		os.Exit(2)
	}
	var img v1.Image
	var err error
	if *disk != "" {
		img, err = images.ContainerDisk(*disk)
	} else {
		img, err = images.KernelBoot(filepath.Join(*guest, "vmlinuz"), *kernelPath, filepath.Join(*guest, "initramfs.gz"), *initrdPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "guestimage:", err)
		os.Exit(1)
	}
	ref, err := write(img, *out, *tag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guestimage:", err)
		os.Exit(1)
	}
	fmt.Println(ref)
}

func write(img v1.Image, out, tag string) (string, error) {
	want, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("digest image: %w", err)
	}
	if out, err = filepath.Abs(out); err != nil {
		return "", fmt.Errorf("resolve out: %w", err)
	}
	ref := "oci:" + out + ":" + tag
	if has(out, tag, want.String()) {
		return ref, nil
	}
	tmp := fmt.Sprintf("%s.new-%d", out, os.Getpid())
	defer os.RemoveAll(tmp)
	if _, err := images.WriteLayout(tmp, img, tag); err != nil {
		return "", err
	}
	old := fmt.Sprintf("%s.old-%d", out, os.Getpid())
	if err := os.Rename(out, old); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("replace layout: %w", err)
	}
	defer os.RemoveAll(old)
	if err := os.Rename(tmp, out); err != nil {
		return "", fmt.Errorf("replace layout: %w", err)
	}
	return ref, nil
}

// has reports whether the layout at dir names an image tag with manifest digest want.
func has(dir, tag, want string) bool {
	p, err := layout.FromPath(dir)
	if err != nil {
		return false
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return false
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return false
	}
	for _, d := range m.Manifests {
		if d.Annotations[images.RefNameAnnotation] == tag && d.Digest.String() == want {
			return true
		}
	}
	return false
}
