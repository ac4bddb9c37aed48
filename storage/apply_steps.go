package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/qemuimg"
)

// do runs one action; it returns the resolved real path of a host path, else "".
func (a *applier) do(ctx context.Context, act Action) (string, error) {
	switch act.Kind {
	case ActPull:
		return "", a.pull(ctx, act)
	case ActOverlay:
		return "", a.overlay(ctx, act)
	case ActEmpty:
		return "", a.empty(ctx, act)
	case ActISO:
		return "", a.iso(act)
	case ActHostPath:
		return a.hostPath(act)
	case ActLinkKernel:
		return "", a.link(act)
	}
	return "", fmt.Errorf("action %q: %w", act.Kind, ErrUnsupportedMode)
}

// pull pulls an image, or the digest pinned by an earlier Apply (offline if still cached).
func (a *applier) pull(ctx context.Context, act Action) error {
	ref, policy := act.Image, act.PullPolicy
	if d, ok := a.st.Images[act.Image]; ok {
		pinned, err := oci.Pin(act.Image, d)
		if err != nil {
			return err
		}
		ref, policy = pinned, oci.PullIfNotPresent
	}
	t0 := time.Now()
	img, err := a.h.Images.PullWith(ctx, ref, policy, act.Credentials)
	if a.h.OnPull != nil {
		a.h.OnPull(time.Since(t0), err)
	}
	if err != nil {
		return err
	}
	a.images[act.Image] = img
	a.st.Images[act.Image] = img.Digest
	a.res.Images[act.Image] = img.Digest
	return nil
}

// overlay creates a qcow2 over a containerDisk's disk or a claim image, unless the planned
// overlay is already there (its backing file and format as planned).
func (a *applier) overlay(ctx context.Context, act Action) error {
	var backing string
	var format qemu.DiskFormat
	if act.Image != "" {
		img, ok := a.images[act.Image]
		if !ok {
			return fmt.Errorf("image %s was not pulled by the plan", act.Image)
		}
		d, err := a.h.Images.ContainerDisk(ctx, img, act.ImagePath)
		if err != nil {
			return err
		}
		backing, format = d.Path, qemu.DiskFormat(d.Format)
		a.res.Bases[act.Volume] = backing
	} else {
		r, err := a.claimFile(act.Backing, act.BackingRoot, act.Block, false, 0)
		if err != nil {
			return err
		}
		backing, format = r.path, act.BackingFormat
	}
	return a.createQCOW2(ctx, act.Path, qemuimg.CreateOptions{Backing: backing, BackingFormat: string(format)},
		func(info *qemuimg.Info) bool {
			return info.BackingFilename == backing && info.BackingFormat == string(format)
		})
}

func (a *applier) empty(ctx context.Context, act Action) error {
	return a.createQCOW2(ctx, act.Path, qemuimg.CreateOptions{SizeBytes: act.SizeBytes},
		func(info *qemuimg.Info) bool { return info.BackingFilename == "" && info.VirtualSize == act.SizeBytes })
}

// createQCOW2 keeps an existing image that matches (same as planned) and refuses one that does
// not (ErrConflict: it may hold someone's data); otherwise it creates the image under a
// temporary name and renames it into place, so a crash never leaves a half-made file there.
// An existing entry is inspected without following a symlink: the VM's user owns the folder
// and may have swapped its disk for a link to another VM's disk or to a file of root's.
func (a *applier) createQCOW2(ctx context.Context, path string, o qemuimg.CreateOptions, matches func(*qemuimg.Info) bool) error {
	if _, err := os.Lstat(path); err == nil {
		info, err := inspectInside(ctx, a.h.QemuImg, a.p.VMDir, path)
		if err != nil {
			return err
		}
		if info.Format != string(qemu.FormatQCOW2) || !matches(info) {
			return fmt.Errorf("%s: %w", path, ErrConflict)
		}
		return nil
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp) // a leftover of a killed Apply
	if err := a.h.QemuImg.CreateQCOW2(ctx, tmp, o); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("create %s: %w", path, err)
	}
	a.created(path)
	return nil
}

// iso (re)builds a cloud-init ISO; the content depends only on the plan.
func (a *applier) iso(act Action) error {
	_, statErr := os.Lstat(act.Path)
	if err := cloudinit.WriteISO(act.Path, act.CloudInit); err != nil {
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		a.created(act.Path)
	}
	return nil
}

// hostPath resolves a hostDisk or claim image (creating it when planned) and returns its real
// path.
func (a *applier) hostPath(act Action) (string, error) {
	r, err := a.claimFile(act.Path, act.Root, act.Block, act.Create, act.SizeBytes)
	if err != nil {
		return "", err
	}
	if r.created {
		a.created(r.path)
	}
	return r.path, nil
}

// claimFile finds a file beneath root (confined), or a block device (root "").
func (a *applier) claimFile(p, root string, block, create bool, size int64) (*resolved, error) {
	if root == "" {
		return statDisk(p, block)
	}
	rel := strings.TrimPrefix(p, root+"/")
	if rel == p || rel == "" {
		return nil, fmt.Errorf("%s: %w %s", p, ErrOutsideRoot, root)
	}
	return openBeneath(root, rel, create, size)
}

// link puts the image's kernel (and initrd) at the planned paths.
func (a *applier) link(act Action) error {
	img, ok := a.images[act.Image]
	if !ok {
		return fmt.Errorf("image %s was not pulled by the plan", act.Image)
	}
	k, err := a.h.Images.KernelBoot(img, act.ImagePath, act.InitrdImagePath)
	if err != nil {
		return err
	}
	if err := a.linkFile(k.Kernel, act.Path); err != nil {
		return err
	}
	if act.Initrd != "" {
		return a.linkFile(k.Initrd, act.Initrd)
	}
	return nil
}

// linkFile replaces dst by a hard link to src (which stays valid even if the cache entry is
// removed later), or by a copy across filesystems.
func (a *applier) linkFile(src, dst string) error {
	dfi, statErr := os.Lstat(dst)
	if sfi, err := os.Stat(src); statErr == nil && err == nil && os.SameFile(sfi, dfi) {
		return nil // already linked; renaming another link of the same inode over it would be a no-op
	}
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Link(src, tmp); errors.Is(err, syscall.EXDEV) {
		if err := copyFile(src, tmp); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("link %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("link %s: %w", dst, err)
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		a.created(dst)
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return nil
}
