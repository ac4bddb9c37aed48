package qemu

import (
	"context"
	"fmt"

	"github.com/vmlet/vmlet/internal/revert"
)

// AddDisk hotplugs a disk: blockdev-add of its file and format nodes, then device_add of a
// virtio-blk-pci on a free PCIe root port (d.Port, or the first free one) or a scsi-hd/scsi-cd
// on the virtio-scsi controller. SATA disks cannot be hotplugged (ErrNotHotpluggable). A disk
// with Files first hands them to QEMU (add-fd into a fresh fdset) and its file node opens
// that fdset instead of Path; the caller may close them when AddDisk returns. If a step
// fails, the earlier ones are undone. Once begun, the steps run to the end even if ctx
// is cancelled (committed). It returns when QEMU has added the device; the guest notices a
// moment later.
//
// QMP: [add-fd per file], blockdev-add, blockdev-add, device_add.
func (vm *VM) AddDisk(ctx context.Context, d Disk) error {
	d = d.withDefaults()
	if err := d.validate("disk"); err != nil {
		return err
	}
	if d.Bus == BusSATA {
		return fmt.Errorf("add disk %s: %w: sata (ahci) has no hotplug", d.ID, ErrNotHotpluggable)
	}
	if d.Bus == BusSCSI && !vm.spec.needsSCSI() {
		return fmt.Errorf("add disk %s: %w: the vm has no virtio-scsi controller (Spec.SCSI)", d.ID, ErrNotHotpluggable)
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	port, err := vm.claimSlot(d.ID, d.namespace(), d.Port)
	if err != nil {
		return fmt.Errorf("add disk %s: %w", d.ID, err)
	}
	d.Port = port
	ctx, cancel := committed(ctx)
	defer cancel()
	return vm.attachDisk(ctx, d)
}

// attachDisk adds d (defaults applied, Port set) over QMP and records it. Shared by Start's
// cold plug, AddDisk and migration targets.
func (vm *VM) attachDisk(ctx context.Context, d Disk) error {
	isBlk, err := diskIsBlockDevice(d)
	if err != nil {
		return fmt.Errorf("add disk %s: %w", d.ID, err)
	}
	r := revert.New()
	defer r.Fail()
	filename, set := d.Path, 0
	if len(d.Files) > 0 {
		if set, err = vm.addDiskFdset(ctx, d, r); err != nil {
			return fmt.Errorf("add disk %s: %w", d.ID, err)
		}
		filename = fdsetPath(set)
	}
	if err := vm.execute(ctx, "blockdev-add", fileNodeArgs(d, hostDriver(isBlk, d.CDROM), filename), nil); err != nil {
		return fmt.Errorf("add disk %s: %w", d.ID, err)
	}
	r.Add(func() { vm.undo("blockdev-del", map[string]any{"node-name": fileNodeName(d.ID)}) })
	if err := vm.execute(ctx, "blockdev-add", formatNodeArgs(d), nil); err != nil {
		return fmt.Errorf("add disk %s: %w", d.ID, err)
	}
	r.Add(func() { vm.undo("blockdev-del", map[string]any{"node-name": formatNodeName(d.ID)}) })
	if err := vm.execute(ctx, "device_add", diskDeviceArgs(d, d.Port), nil); err != nil {
		return fmt.Errorf("add disk %s: %w", d.ID, err)
	}
	r.Success()
	if set != 0 {
		vm.recordFdset(d.ID, set)
	}
	vm.recordDisk(d)
	vm.log.Info("disk attached", "id", d.ID, "bus", d.Bus, "slot", d.Port, "files", len(d.Files), "fdset", set)
	return nil
}

// RemoveDisk hot-unplugs a disk: device_del, wait for the guest to release it
// (DEVICE_DELETED for this id; QEMU also sends one for the …/virtio-backend path, which is
// ignored), then blockdev-del of both nodes and, for a disk given as Files, remove-fd of its
// fdset. A guest that does not cooperate keeps the device: the ctx deadline then ends the wait
// and the disk stays attached.
//
// QMP: device_del, event DEVICE_DELETED, blockdev-del, blockdev-del, [remove-fd].
func (vm *VM) RemoveDisk(ctx context.Context, id string) error {
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	d, ok := vm.disk(id)
	if !ok {
		return fmt.Errorf("remove disk %s: %w", id, ErrUnknownDevice)
	}
	if d.Bus == BusSATA {
		return fmt.Errorf("remove disk %s: %w: sata (ahci) has no hotplug", id, ErrNotHotpluggable)
	}
	if err := vm.deviceDel(ctx, id); err != nil {
		return fmt.Errorf("remove disk %s: %w", id, err)
	}
	vm.forgetDevice(id) // the device is gone from the guest whatever happens to the nodes
	if err := vm.execute(ctx, "blockdev-del", map[string]any{"node-name": formatNodeName(id)}, nil); err != nil {
		return fmt.Errorf("remove disk %s: %w", id, err)
	}
	if err := vm.execute(ctx, "blockdev-del", map[string]any{"node-name": fileNodeName(id)}, nil); err != nil {
		return fmt.Errorf("remove disk %s: %w", id, err)
	}
	if err := vm.removeDiskFdset(ctx, id); err != nil {
		return fmt.Errorf("remove disk %s: %w", id, err)
	}
	vm.log.Info("disk detached", "id", id)
	return nil
}
