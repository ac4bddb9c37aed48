package storage

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Owner is the user the VM's QEMU runs as (its launcher's uid and gid). Apply hands that user
// exactly the files the VM is given, as KubeVirt's virt-handler does for its `qemu` user (107).
type Owner struct {
	UID, GID int
}

// Grant is one ownership change: Path gets UID:GID and, unless Mode is 0, that mode.
type Grant struct {
	Path     string
	UID, GID int
	Mode     fs.FileMode
	// Volume names a host file (hostDisk, claim) outside the VM folder: the folders above it
	// must let the user through, which Apply checks (ErrNotSearchable) rather than change.
	Volume string
}

// Grants decides, without touching the host, which of a VM's files its QEMU user o gets:
//   - the VM folder and its disks/ and boot/ folders: o, 0700 (no other VM's user gets in);
//   - the files Apply makes there (qcow2 overlays, empty disks, cloud-init ISOs): o, 0600;
//   - hostDisk images and claims (files or block devices) at their resolved paths, and a
//     claim image an ephemeral overlay reads: o, mode kept (KubeVirt chowns them to 107 too);
//     they keep that owner after the VM is gone.
//
// Nothing else: the shared image cache (containerDisk bases, kernels; the kernel and initrd
// in boot/ are hard links to it) stays root's and world-readable, never writable by a VM.
// resolved maps a volume to its real host path (Apply's symlink-free result).
func Grants(p *VMPlan, resolved map[string]string, o Owner) []Grant {
	g := func(path string, mode fs.FileMode) Grant {
		return Grant{Path: path, UID: o.UID, GID: o.GID, Mode: mode}
	}
	out := []Grant{
		g(p.VMDir, 0o700),
		g(filepath.Join(p.VMDir, disksDir), 0o700),
		g(filepath.Join(p.VMDir, bootDir), 0o700),
	}
	for _, a := range p.Actions {
		switch a.Kind {
		case ActOverlay:
			out = append(out, g(a.Path, 0o600))
			if a.Image == "" && a.Backing != "" {
				gr := g(a.Backing, 0)
				gr.Volume = a.Volume
				out = append(out, gr)
			}
		case ActEmpty, ActISO:
			out = append(out, g(a.Path, 0o600))
		case ActHostPath:
			path := a.Path
			if r, ok := resolved[a.Volume]; ok {
				path = r
			}
			gr := g(path, 0)
			gr.Volume = a.Volume
			out = append(out, gr)
		case ActPull, ActLinkKernel: // the shared cache: read-only for every VM
		}
	}
	return out
}

// applyGrants carries grants out. Volumes (host paths, resolved already) are followed; the
// VM folder's own entries are reached without following any symlink (grantInside): the VM's
// user owns that folder and could have planted one.
// Equivalent to: chown UID:GID PATH && chmod MODE PATH, per grant.
func applyGrants(vmDir string, grants []Grant) error {
	for _, gr := range grants {
		if gr.Volume == "" {
			if err := grantInside(vmDir, gr); err != nil {
				return &VolumeError{Err: err}
			}
			continue
		}
		u := User{UID: uint32(gr.UID), GID: uint32(gr.GID)}
		if err := CheckSearchable(filepath.Dir(gr.Path), u, os.Stat); err != nil {
			return &VolumeError{Volume: gr.Volume, Err: err}
		}
		if err := os.Chown(gr.Path, gr.UID, gr.GID); err != nil {
			return &VolumeError{Volume: gr.Volume, Err: fmt.Errorf("hand %s to %d:%d: %w", gr.Path, gr.UID, gr.GID, err)}
		}
		if gr.Mode != 0 {
			if err := os.Chmod(gr.Path, gr.Mode); err != nil {
				return fmt.Errorf("hand %s to %d:%d: %w", gr.Path, gr.UID, gr.GID, err)
			}
		}
	}
	return nil
}
