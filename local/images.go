package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrImageNotFound is returned for an image reference the node cannot resolve.
var ErrImageNotFound = errors.New("image not found")

// ImageDirs resolves image references to folders on this machine that hold the image's files
// (the unpacked root filesystem of the image). It is local mode's image source until image
// pulling lands: `vmlet local` maps the demo image to the test guest's build folder.
type ImageDirs map[string]string

// KernelBoot returns the host paths of the kernel and initrd that image carries at kernelPath
// and initrdPath. Paths inside the image may not escape its folder (no "..", no symlinks out).
func (m ImageDirs) KernelBoot(image, kernelPath, initrdPath string) (kernel, initrd string, err error) {
	root, ok := m[image]
	if !ok {
		return "", "", fmt.Errorf("resolve image %q: %w", image, ErrImageNotFound)
	}
	if kernelPath == "" {
		return "", "", fmt.Errorf("resolve image %q: kernelPath is required", image)
	}
	if kernel, err = inImage(root, kernelPath); err != nil {
		return "", "", err
	}
	if initrdPath != "" {
		if initrd, err = inImage(root, initrdPath); err != nil {
			return "", "", err
		}
	}
	return kernel, initrd, nil
}

// inImage resolves p inside root, following symlinks only while they stay inside root.
func inImage(root, p string) (string, error) {
	rootReal, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", fmt.Errorf("resolve image root: %w", err)
	}
	full, err := filepath.EvalSymlinks(filepath.Join(rootReal, filepath.Clean("/"+p)))
	if err != nil {
		return "", fmt.Errorf("resolve %q in image: %w", p, err)
	}
	if full != rootReal && !strings.HasPrefix(full, rootReal+string(filepath.Separator)) {
		return "", fmt.Errorf("resolve %q in image: escapes the image", p)
	}
	fi, err := os.Stat(full)
	if err != nil {
		return "", fmt.Errorf("resolve %q in image: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return "", fmt.Errorf("resolve %q in image: not a non-empty regular file", p)
	}
	return full, nil
}
