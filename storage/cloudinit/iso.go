package cloudinit

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/vmlet/vmlet/internal/revert"
)

const sectorSize = 2048

// WriteISO writes the config's disk to path with Rock Ridge names (plus Joliet names for
// NoCloud, whose files are all at the root; see build). It replaces path atomically: a
// temporary file in the same folder is renamed over it, so a QEMU that has the old one open keeps
// reading the old one. The result is mode 0444.
func WriteISO(path string, c *Config) error {
	files, err := c.Files()
	if err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	dir := filepath.Dir(path)
	work, err := os.MkdirTemp(dir, ".cloudinit-work-")
	if err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	defer os.RemoveAll(work)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	undo := revert.New()
	defer undo.Fail()
	undo.Add(func() { tmp.Close(); os.Remove(tmp.Name()) })
	if err := build(tmp, work, files, c.Label()); err != nil {
		return fmt.Errorf("write cloud-init iso %s: %w", path, err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write cloud-init iso: %w", err)
	}
	undo.Success()
	return nil
}

func build(f *os.File, work string, files map[string][]byte, label string) error {
	iso, err := iso9660.Create(file.New(f, false), 0, 0, sectorSize, work)
	if err != nil {
		return fmt.Errorf("create iso9660: %w", err)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	subdirs := false
	for _, n := range names {
		if d := path.Dir(n); d != "." {
			subdirs = true
			if err := iso.Mkdir("/" + d); err != nil {
				return fmt.Errorf("mkdir %s: %w", d, err)
			}
		}
		w, err := iso.OpenFile("/"+n, os.O_CREATE|os.O_RDWR)
		if err != nil {
			return fmt.Errorf("create %s: %w", n, err)
		}
		_, err = w.Write(files[n])
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", n, err)
		}
	}
	// ECMA-119 pads the volume identifier with spaces (go-diskfs would pad with NULs). Joliet
	// only without subfolders: go-diskfs v1.9.4 points Joliet entries of subfolders at the
	// primary tree's extents, which Joliet readers then decode as garbage names.
	opts := iso9660.FinalizeOptions{RockRidge: true, Joliet: !subdirs, VolumeIdentifier: fmt.Sprintf("%-32s", label)}
	if err := iso.Finalize(opts); err != nil {
		return fmt.Errorf("finalize iso9660: %w", err)
	}
	// Whole sectors: the last file ends where its data ends, and a block device of a size that is
	// not a multiple of 512 loses its tail in the guest.
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if rem := fi.Size() % sectorSize; rem != 0 {
		return f.Truncate(fi.Size() + sectorSize - rem)
	}
	return nil
}

// ReadISO reads a cloud-init ISO back (with Rock Ridge names): its volume label and every
// regular file by slash path relative to the root.
func ReadISO(path string) (label string, files map[string][]byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("read iso: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", nil, fmt.Errorf("read iso: %w", err)
	}
	iso, err := iso9660.Read(file.New(f, true), fi.Size(), 0, sectorSize)
	if err != nil {
		return "", nil, fmt.Errorf("read iso %s: %w", path, err)
	}
	files = map[string][]byte{}
	err = fs.WalkDir(iso, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(iso, p)
		files[p] = b
		return err
	})
	if err != nil {
		return "", nil, fmt.Errorf("read iso %s: %w", path, err)
	}
	return strings.TrimRight(iso.Label(), " "), files, nil
}
