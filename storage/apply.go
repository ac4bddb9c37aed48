package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/vmlet/vmlet/internal/faultpoint"
	"github.com/vmlet/vmlet/internal/revert"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/oci"
	"github.com/vmlet/vmlet/storage/qemuimg"
)

// stateFile marks a VM folder as storage's and pins the image digests of its first Apply.
const stateFile = ".vmlet-storage.json"

// Host is the host-wide side of storage: the image cache and qemu-img.
type Host struct {
	Images  *oci.Cache
	QemuImg qemuimg.Tool
	// OnPull, if set, is told of every image pull an Apply makes (a cache hit included): how
	// long it took and its error (the node agent's metrics). Called from concurrent Applies.
	OnPull func(d time.Duration, err error)
}

// Result is what Apply made: the disks (host paths resolved to their real, symlink-free
// paths), the kernel boot, and the image digests used.
type Result struct {
	Disks  []qemu.Disk
	Boot   qemu.Boot
	Images map[string]string // image reference → "sha256:…" of the manifest used
	// Bases are the containerDisk images' disk files in the shared cache that the overlays
	// read (volume → path), for labelling (FilesOf).
	Bases map[string]string
}

// state is stateFile's content.
type state struct {
	Images map[string]string `json:"images"` // pinned at the first successful Apply
}

// Apply carries out a plan. It is idempotent: files that exist as planned are kept (an overlay
// keeps the guest's writes), and images are pinned to the digests of the first Apply, so a
// moved tag never changes a VM's disks. If a step fails, Apply removes what this call created
// (files, the VM folder) and returns a *VolumeError; pulled images stay in the shared cache.
// Apply runs once at a time per VM folder (the agent reconciles a VMI at a time); different VMs
// may apply concurrently.
func (h *Host) Apply(ctx context.Context, p *VMPlan) (*Result, error) {
	a := &applier{h: h, p: p, res: &Result{Images: map[string]string{}, Bases: map[string]string{}}, images: map[string]*oci.Image{}, undo: revert.New()}
	defer a.undo.Fail()
	if err := a.prepareDir(); err != nil {
		return nil, &VolumeError{Err: err}
	}
	resolvedPaths := map[string]string{}
	for _, act := range p.Actions {
		real, err := a.do(ctx, act)
		if err != nil {
			ve := &VolumeError{Volume: act.Volume, Err: fmt.Errorf("%s: %w", act.Kind, err)}
			if act.Kind == ActPull {
				ve.Image = act.Image
			}
			return nil, ve
		}
		if real != "" {
			// QEMU would open the file twice and fail on its own image lock, on every retry.
			for other, p := range resolvedPaths {
				if p == real && other != act.Volume {
					return nil, volErr(act.Volume, ErrInvalidVolume, "%s is volume %s's file too (%s): one file can back one volume", act.Path, other, real)
				}
			}
			resolvedPaths[act.Volume] = real
		}
		faultpoint.Hit("storage.action-done", string(act.Kind)) // the fault matrix's kill between steps
	}
	if err := a.saveState(); err != nil {
		return nil, &VolumeError{Err: err}
	}
	if p.Owner != nil {
		if err := applyGrants(p.VMDir, Grants(p, resolvedPaths, *p.Owner)); err != nil {
			return nil, err // a *VolumeError
		}
	}
	for _, d := range p.Disks {
		if real, ok := resolvedPaths[p.DiskVolumes[d.ID]]; ok {
			d.Path = real
		}
		a.res.Disks = append(a.res.Disks, d)
	}
	a.res.Boot = p.Boot
	a.undo.Success()
	return a.res, nil
}

type applier struct {
	h      *Host
	p      *VMPlan
	res    *Result
	st     state
	images map[string]*oci.Image
	undo   *revert.Reverter // removes what this Apply created if it fails
}

// created registers a path this Apply made, to be removed (newest first) if Apply fails.
func (a *applier) created(path string) {
	a.undo.Add(func() { _ = os.RemoveAll(path) })
}

// prepareDir makes VMDir (with its state file) and its sub-folders, or reads the state of an
// earlier Apply.
func (a *applier) prepareDir() error {
	dir := a.p.VMDir
	switch b, err := readNoFollow(filepath.Join(dir, stateFile), maxStateBytes); {
	case err == nil:
		if err := json.Unmarshal(b, &a.st); err != nil {
			return fmt.Errorf("read %s: %w", stateFile, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		// 0700 from the start: nobody but root (and, once Grants run, the VM's user) lists
		// it or reads what is made in it (images are 0644, ISOs 0444 until handed over).
		if err := os.Mkdir(dir, 0o700); err == nil {
			a.created(dir)
		} else if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create vm folder: %w", err)
		} else if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			return fmt.Errorf("vm folder %s: %w (it holds files but no %s)", dir, ErrNotStorageDir, stateFile)
		}
		if err := a.saveState(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("read %s: %w", stateFile, err)
	}
	if a.st.Images == nil {
		a.st.Images = map[string]string{}
	}
	for _, sub := range []string{disksDir, bootDir} {
		p := filepath.Join(dir, sub)
		if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create vm folder: %w", err)
		}
		// The VM's user owns dir and may have put a symlink here: Apply would make its files
		// wherever it points, and hand that folder over.
		if fi, err := os.Lstat(p); err != nil {
			return fmt.Errorf("create vm folder: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("vm folder %s: %w (%v, not a folder)", p, ErrOutsideRoot, fi.Mode().Type())
		}
	}
	return nil
}

func (a *applier) saveState() error {
	b, err := json.Marshal(a.st)
	if err != nil {
		return fmt.Errorf("write %s: %w", stateFile, err)
	}
	// Never through a symlink the VM's user planted at either name (writeNew).
	return writeNew(filepath.Join(a.p.VMDir, stateFile), filepath.Join(a.p.VMDir, stateFile+".tmp"), b, 0o600)
}

// Cleanup removes a VM folder made by Apply and everything in it (overlays, empty disks,
// ISOs, kernel links). It is idempotent; a folder that exists but was not made by Apply (no
// state file, not empty) is refused with ErrNotStorageDir. Host disks and claims are not in
// the folder and are left alone.
func Cleanup(vmDir string) error {
	if !filepath.IsAbs(vmDir) || filepath.Clean(vmDir) != vmDir || vmDir == "/" {
		return fmt.Errorf("clean up %q: %w", vmDir, ErrNotStorageDir)
	}
	if _, err := os.Lstat(vmDir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if _, err := os.Lstat(filepath.Join(vmDir, stateFile)); err != nil {
		if ents, rerr := os.ReadDir(vmDir); rerr != nil || len(ents) > 0 {
			return fmt.Errorf("clean up %s: %w", vmDir, ErrNotStorageDir)
		}
	}
	if err := os.RemoveAll(vmDir); err != nil {
		return fmt.Errorf("clean up %s: %w", vmDir, err)
	}
	return nil
}
