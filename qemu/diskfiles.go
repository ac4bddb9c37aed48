package qemu

import (
	"context"
	"fmt"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/revert"
)

// Disks given as open files (Disk.Files) instead of a path QEMU opens itself.
//
// Each file goes to QEMU with add-fd (SCM_RIGHTS) into one fdset per disk, and the file node
// opens "/dev/fdset/N". QEMU's qemu_open of that name dups the set's first fd whose access
// mode (O_ACCMODE) equals the one it asks for, then sets the other status flags on the dup
// with fcntl: so a writable disk needs an O_RDWR file in the set and a read-only one an
// O_RDONLY file, which checkFiles makes sure of before anything reaches QEMU. Since QEMU 9.1
// the match includes O_DIRECT as well (cache none and directsync open with it; QEMU 10.0
// here answers "Failed to find file descriptor with matching flags=0x4002" otherwise), so
// matchDirect gives the files the O_DIRECT of the disk's cache mode first. The fdset lives as
// long as the disk, because QEMU opens the name again when it reopens the node (a change of
// access mode); RemoveDisk removes it after the nodes (remove-fd).

// MaxDiskFiles is the most files a Disk may have (Files).
const MaxDiskFiles = 4

// validateFiles checks d.Files without touching them (Validate is pure); checkFiles looks at
// the files themselves.
func (d Disk) validateFiles(field string) error {
	if len(d.Files) == 0 {
		return nil
	}
	if len(d.Files) > MaxDiskFiles {
		return specErr(field+".files", strconv.Itoa(len(d.Files)), fmt.Sprintf("at most %d files", MaxDiskFiles))
	}
	if d.Bus == BusSATA {
		return specErr(field+".files", "", "a sata disk goes on the command line and cannot be given as files: use the virtio or scsi bus")
	}
	for i, f := range d.Files {
		if f == nil {
			return specErr(fmt.Sprintf("%s.files[%d]", field, i), "", "is nil")
		}
	}
	return nil
}

// checkFiles checks the handed files of d (defaults applied): each is a regular file or a
// block device, all are the same file as Files[0], none is write-only, and the access mode
// QEMU will ask for (O_RDWR for a writable disk, O_RDONLY for a read-only one) is among them.
// It reports whether they are a block device. Equivalent to fstat and fcntl(F_GETFL) of each.
func (d Disk) checkFiles(field string) (isBlk bool, err error) {
	want, wantName := unix.O_RDWR, "O_RDWR"
	if d.ReadOnly {
		want, wantName = unix.O_RDONLY, "O_RDONLY"
	}
	var first unix.Stat_t
	found := false
	for i, f := range d.Files {
		name := fmt.Sprintf("%s.files[%d]", field, i)
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return false, fmt.Errorf("%s: fstat: %w", name, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG, unix.S_IFBLK:
		default:
			return false, specErr(name, f.Name(), "must be a regular file or a block device")
		}
		if i == 0 {
			first = st
		} else if st.Dev != first.Dev || st.Ino != first.Ino {
			return false, specErr(name, f.Name(), "is not the same file as files[0]")
		}
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			return false, fmt.Errorf("%s: fcntl F_GETFL: %w", name, err)
		}
		switch fl & unix.O_ACCMODE {
		case want:
			found = true
		case unix.O_WRONLY:
			return false, specErr(name, f.Name(), "is open write-only: QEMU opens images O_RDWR or O_RDONLY")
		}
	}
	if !found {
		what := pick(d.ReadOnly, "a read-only", "a writable")
		return false, specErr(field+".files", "", fmt.Sprintf("%s disk needs an %s file (QEMU dups the fd of the access mode it opens with)", what, wantName))
	}
	return first.Mode&unix.S_IFMT == unix.S_IFBLK, nil
}

// matchDirect gives each of d's files (defaults applied) the O_DIRECT status flag its cache
// mode opens with (on for none and directsync, off otherwise), the other flags unchanged.
// Status flags belong to the open file description, which the caller's file shares with
// QEMU's copies: QEMU 7.2 changed it the same way when it set O_DIRECT on its dup.
// Equivalent to fcntl(F_SETFL) of each file.
func (d Disk) matchDirect(field string) error {
	for i, f := range d.Files {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			return fmt.Errorf("%s.files[%d]: fcntl F_GETFL: %w", field, i, err)
		}
		want := fl &^ unix.O_DIRECT
		if d.Cache.direct() {
			want |= unix.O_DIRECT
		}
		if want == fl {
			continue
		}
		if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, want); err != nil {
			return fmt.Errorf("%s.files[%d]: set O_DIRECT %v for cache %s: %w", field, i, d.Cache.direct(), d.Cache, err)
		}
	}
	return nil
}

// diskIsBlockDevice reports whether d's image is a block device: from its handed files
// (checked, see checkFiles, and given the O_DIRECT of its cache mode, see matchDirect) or
// from its path.
func diskIsBlockDevice(d Disk) (bool, error) {
	if len(d.Files) > 0 {
		isBlk, err := d.checkFiles("disk")
		if err != nil {
			return false, err
		}
		return isBlk, d.matchDirect("disk")
	}
	return isBlockDevice(d.Path)
}

// checkSpecFiles runs checkFiles on every disk of spec with handed files, so that Start
// refuses them before QEMU runs.
func checkSpecFiles(spec *Spec) error {
	for i, d := range spec.Disks {
		if len(d.Files) == 0 {
			continue
		}
		if _, err := d.withDefaults().checkFiles(fmt.Sprintf("disks[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// addDiskFdset hands d.Files to QEMU into a new fdset (opaque "disk ID", seen in
// query-fdsets) and returns its id; r removes the set again on failure.
//
// QMP: add-fd {"fdset-id": N} with the file in SCM_RIGHTS, once per file.
func (vm *VM) addDiskFdset(ctx context.Context, d Disk, r *revert.Reverter) (int, error) {
	set := vm.newFdset()
	for i, f := range d.Files {
		args := map[string]any{"fdset-id": set, "opaque": "disk " + d.ID}
		if err := vm.executeWithFiles(ctx, "add-fd", args, nil, f); err != nil {
			return 0, err
		}
		if i == 0 {
			r.Add(func() { vm.undo("remove-fd", map[string]any{"fdset-id": set}) })
		}
	}
	return set, nil
}

// newFdset returns a fdset id not used before in this VM (from firstDiskFdset up).
func (vm *VM) newFdset() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.nextFdset < firstDiskFdset {
		vm.nextFdset = firstDiskFdset
	}
	vm.nextFdset++
	return vm.nextFdset - 1
}

// recordFdset remembers that disk id's file node was opened from fdset set.
func (vm *VM) recordFdset(id string, set int) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.fdsets == nil {
		vm.fdsets = map[string]int{}
	}
	vm.fdsets[id] = set
}

// removeDiskFdset removes the fdset of disk id, if it has one, once its nodes are gone.
// QEMU 9.1 and later close the set's fds at once; earlier ones (7.2) only while the guest
// runs, so a set removed from a paused VM stays, marked removed, until the guest runs.
// QMP: remove-fd {"fdset-id": N}.
func (vm *VM) removeDiskFdset(ctx context.Context, id string) error {
	vm.mu.Lock()
	set, ok := vm.fdsets[id]
	delete(vm.fdsets, id)
	vm.mu.Unlock()
	if !ok {
		return nil
	}
	return vm.execute(ctx, "remove-fd", map[string]any{"fdset-id": set}, nil)
}

// fdsetPath is the name under which QEMU opens an fd of fdset set.
func fdsetPath(set int) string { return "/dev/fdset/" + strconv.Itoa(set) }
