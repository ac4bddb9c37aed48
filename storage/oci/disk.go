package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// DiskDir is where a containerDisk keeps its one disk file when no path is given.
const DiskDir = "/disk"

// Disk is a containerDisk's validated disk file, usable as the read-only backing file of
// overlays.
type Disk struct {
	Path        string // in the cache; read-only
	Format      string // "raw" or "qcow2" (probed by qemu-img, then always passed explicitly)
	VirtualSize int64
}

// ContainerDisk finds and checks the disk of a containerDisk image: the file at diskPath (a path
// inside the image) or else the one regular file in /disk/. It must be non-empty, raw or
// qcow2, and a qcow2 must not name a backing file or an external data file. The verdict is
// cached next to the image (the image is immutable). Errors are *ImageError with
// ReasonInvalidContainerDisk.
func (c *Cache) ContainerDisk(ctx context.Context, img *Image, diskPath string) (*Disk, error) {
	d, err := c.containerDisk(ctx, img, diskPath)
	if err != nil {
		if _, ok := errors.AsType[*ImageError](err); ok {
			return nil, err
		}
		return nil, &ImageError{Image: img.Ref, Reason: ReasonInvalidContainerDisk, Err: err}
	}
	return d, nil
}

func (c *Cache) containerDisk(ctx context.Context, img *Image, diskPath string) (*Disk, error) {
	sum := sha256.Sum256([]byte(diskPath))
	verdict := filepath.Join(img.dir, "check-disk-"+hex.EncodeToString(sum[:8])+".json")
	if b, err := os.ReadFile(verdict); err == nil {
		var d Disk
		if json.Unmarshal(b, &d) == nil && d.Path != "" {
			return &d, nil
		}
	}
	meta, err := img.meta()
	if err != nil {
		return nil, err
	}
	p, err := findDisk(img, meta, diskPath)
	if err != nil {
		return nil, err
	}
	info, err := c.o.QemuImg.Info(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("check disk: %w", err)
	}
	switch {
	case info.Format != "raw" && info.Format != "qcow2":
		return nil, fmt.Errorf("check disk %s: format %q: %w", rel(img, p), info.Format, ErrUnsupportedFormat)
	case info.BackingFilename != "":
		return nil, fmt.Errorf("check disk %s: backing file %q: %w", rel(img, p), info.BackingFilename, ErrBackingFile)
	case info.FormatSpecific.Data.DataFile != "":
		return nil, fmt.Errorf("check disk %s: external data file %q: %w", rel(img, p), info.FormatSpecific.Data.DataFile, ErrBackingFile)
	case info.FormatSpecific.Data.Corrupt:
		return nil, fmt.Errorf("check disk %s: qcow2 marked corrupt: %w", rel(img, p), ErrInvalidImage)
	}
	d := &Disk{Path: p, Format: info.Format, VirtualSize: info.VirtualSize}
	if b, err := json.Marshal(d); err == nil {
		_ = writeFileAtomic(verdict, b) // only a cache: a failure costs a qemu-img run next time
	}
	return d, nil
}

func findDisk(img *Image, meta *imageMeta, diskPath string) (string, error) {
	if diskPath != "" {
		return regularFile(img, meta, diskPath, ErrNoDisk)
	}
	var names []string
	ents, err := os.ReadDir(filepath.Join(img.Root, DiskDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("find disk: %w", err)
	}
	for _, e := range ents {
		names = append(names, path.Join(DiskDir, e.Name()))
	}
	for p := range meta.Skipped { // symlinks and devices count as entries too
		if path.Dir(p) == DiskDir {
			names = append(names, p)
		}
	}
	sort.Strings(names)
	switch len(names) {
	case 0:
		return "", fmt.Errorf("find disk: nothing in %s/: %w", DiskDir, ErrNoDisk)
	case 1:
		return regularFile(img, meta, names[0], ErrNoDisk)
	default:
		return "", fmt.Errorf("find disk: %s: %w", strings.Join(names, ", "), ErrMultipleDisks)
	}
}

// regularFile checks that p (a path inside the image) is a non-empty regular file and returns
// its path in the cache; missing wraps ErrNoDisk, ErrKernelMissing or ErrInitrdMissing.
func regularFile(img *Image, meta *imageMeta, p string, missing error) (string, error) {
	clean := path.Clean("/" + p)
	if !path.IsAbs(p) || clean != p || clean == "/" {
		return "", fmt.Errorf("path %q: must be an absolute clean path inside the image: %w", p, missing)
	}
	if why, ok := meta.Skipped[clean]; ok {
		return "", fmt.Errorf("%s is a %s, not a regular file: %w", clean, why, missing)
	}
	host := filepath.Join(img.Root, filepath.FromSlash(clean))
	fi, err := os.Lstat(host)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%s: no such file in the image: %w", clean, missing)
	case err != nil:
		return "", fmt.Errorf("%s: %w", clean, err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s is not a regular file: %w", clean, missing)
	case fi.Size() == 0 && errors.Is(missing, ErrNoDisk):
		return "", fmt.Errorf("%s: %w", clean, ErrEmptyDisk)
	case fi.Size() == 0:
		return "", fmt.Errorf("%s is empty: %w", clean, missing)
	}
	return host, nil
}

// Kernel is a kernelBoot image's validated kernel and initrd (empty if none).
type Kernel struct {
	Kernel string
	Initrd string
}

// KernelBoot checks that kernelPath (required) and initrdPath (optional) are non-empty regular
// files in the image. Errors are *ImageError with ReasonInvalidKernelBoot.
func (c *Cache) KernelBoot(img *Image, kernelPath, initrdPath string) (*Kernel, error) {
	wrap := func(err error) error {
		return &ImageError{Image: img.Ref, Reason: ReasonInvalidKernelBoot, Err: err}
	}
	meta, err := img.meta()
	if err != nil {
		return nil, wrap(err)
	}
	if kernelPath == "" {
		return nil, wrap(fmt.Errorf("no kernel path given: %w", ErrKernelMissing))
	}
	k := &Kernel{}
	if k.Kernel, err = regularFile(img, meta, kernelPath, ErrKernelMissing); err != nil {
		return nil, wrap(err)
	}
	if initrdPath != "" {
		if k.Initrd, err = regularFile(img, meta, initrdPath, ErrInitrdMissing); err != nil {
			return nil, wrap(err)
		}
	}
	return k, nil
}

func (img *Image) meta() (*imageMeta, error) {
	b, err := os.ReadFile(filepath.Join(img.dir, metaFile))
	if err != nil {
		return nil, fmt.Errorf("read image metadata: %w", err)
	}
	var m imageMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read image metadata: %w", err)
	}
	return &m, nil
}

func rel(img *Image, p string) string {
	r, err := filepath.Rel(img.Root, p)
	if err != nil {
		return p
	}
	return "/" + filepath.ToSlash(r)
}
