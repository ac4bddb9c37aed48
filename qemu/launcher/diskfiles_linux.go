package launcher

import (
	"context"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/qemu"
)

// Disk images handed over as open files: in cluster mode the launcher's container has its
// mounts fixed at creation, so a volume attached later (a hot-plugged claim) is not in its
// file system. The node agent (root, on the host) opens the image file or block device and
// hands the files over here before the HotplugDisk or Sync that uses the disk; the launcher
// gives them to QEMU as qemu.Disk.Files (add-fd into an fdset; see package qemu).

// diskPool holds the image files handed over, by disk id, until a start or hotplug takes them.
type diskPool struct {
	mu    sync.Mutex
	disks map[string][]*os.File
}

// put stores files for disk id, closing what an earlier hand-over of id left.
func (p *diskPool) put(id string, files []*os.File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.disks == nil {
		p.disks = map[string][]*os.File{}
	}
	closeFiles(p.disks[id])
	p.disks[id] = files
}

// take returns (and forgets) the files handed over for disk id, nil if none; the caller owns
// them.
func (p *diskPool) take(id string) []*os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	files := p.disks[id]
	delete(p.disks, id)
	return files
}

func (p *diskPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, files := range p.disks {
		closeFiles(files)
	}
	p.disks = nil
}

// acceptDisk checks one disk hand-over (1 to qemu.MaxDiskFiles files, each a regular file or
// a block device) and pools it. Access modes are qemu.Disk's to check, when the disk is used.
func (l *Launcher) acceptDisk(req handoffRequest, files []*os.File) error {
	if len(files) < 1 || len(files) > qemu.MaxDiskFiles {
		return fmt.Errorf("hand over disk %s: %w: %d files, want 1-%d", req.Disk, ErrInvalidRequest, len(files), qemu.MaxDiskFiles)
	}
	for i, f := range files {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return fmt.Errorf("hand over disk %s: file %d: %w", req.Disk, i, err)
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFBLK {
			return fmt.Errorf("hand over disk %s: %w: file %d is neither a regular file nor a block device (mode %#o)", req.Disk, ErrInvalidRequest, i, t)
		}
	}
	l.disks.put(req.Disk, files)
	l.log.Info("disk files handed over", "disk", req.Disk, "files", len(files))
	return nil
}

// diskFiles gives each disk of spec the files handed over for it (HandOverDisk), if any, and
// returns all it gave: the caller closes them once QEMU has its copies (or failed).
func (l *Launcher) diskFiles(spec *qemu.Spec) []*os.File {
	var all []*os.File
	for i, d := range spec.Disks {
		if files := l.disks.take(d.ID); files != nil {
			spec.Disks[i].Files = files
			all = append(all, files...)
		}
	}
	return all
}

// HandOverDisk gives the launcher serving socket (its Paths.TapSocket) open files of the
// image of disk id (1 to qemu.MaxDiskFiles: an O_RDWR one for a writable disk, optionally an
// O_RDONLY one; an O_RDONLY one for a read-only disk; each a regular file or a block device):
// the next start or HotplugDisk using that disk id opens the image from them instead of its
// path. A second hand-over of the same id replaces the first. The caller keeps its copies
// (close them after). Equivalent to sendmsg(SCM_RIGHTS) of the fds.
func HandOverDisk(ctx context.Context, socket, id string, files []*os.File) error {
	if err := handOver(ctx, socket, handoffRequest{Disk: id}, files); err != nil {
		return fmt.Errorf("hand over disk %s: %w", id, err)
	}
	return nil
}
