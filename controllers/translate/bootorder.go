package translate

import (
	"slices"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
)

// Boot order, as KubeVirt's domains get it from libvirt. KubeVirt writes a disk's or an
// interface's bootOrder as its <boot order='N'/> (QEMU bootindex=N) and nothing else: no
// <os><boot dev=.../>. libvirt then
//   - with any per-device boot order: gives exactly those devices their index, the others none;
//   - with none: defaults to <boot dev='hd'/>, which it turns into bootindex=1 on the first
//     disk of its own disk list whose device is "disk" or "lun" (never a cdrom: "hd" is not
//     "cdrom"), and no index anywhere else;
//   - starts QEMU with -boot strict=on, so the firmware tries the indexed devices only.
// libvirt's disk list is not the spec's order: it inserts each disk after the last one on the
// same bus (virDomainDiskInsert), so disks are grouped by bus, buses in the order of their first
// disk, and within a bus in the spec's order (KubeVirt names targets vda, vdb, ... / sda, sdb,
// ... in that order). A sata cdrom listed first thus pulls the sata disks ahead of a virtio
// disk listed second.

// anyBootOrder reports whether a disk or a (present) interface of the spec sets bootOrder.
func anyBootOrder(spec *vmletv1.VirtualMachineInstanceSpec) bool {
	for _, d := range spec.Domain.Devices.Disks {
		if d.BootOrder != nil {
			return true
		}
	}
	for _, i := range spec.Domain.Devices.Interfaces {
		if i.BootOrder != nil && i.State != vmletv1.InterfaceStateAbsent {
			return true
		}
	}
	return false
}

// defaultBootDisk is the index in disks (the disks attached at boot, in the spec's order) of the
// one libvirt's <boot dev='hd'/> boots: the first disk or lun in libvirt's bus-grouped order,
// or -1 when there is none (only cdroms, or no disks).
func defaultBootDisk(disks []storage.DiskRequest) int {
	var buses []qemu.DiskBus
	for _, d := range disks {
		if !slices.Contains(buses, d.Bus) {
			buses = append(buses, d.Bus)
		}
	}
	for _, b := range buses {
		for i, d := range disks {
			if d.Bus == b && !d.CDROM {
				return i
			}
		}
	}
	return -1
}
