package controllers

import (
	"errors"
	"fmt"
	"slices"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
)

// targetHot is a hot-plugged disk a migration target starts with: its volume's plan and the
// storage prepared for it on this node.
type targetHot struct {
	plan *storage.VMPlan
	res  *storage.Result
	disk qemu.Disk
}

// targetHotDisks prepares on a migration target the storage of the disks the source runs that
// were hot-plugged (the layout's disks that are the vmi's hotpluggable volumes): the target's
// QEMU starts with them, each pinned to its source port by translate.MigrationTarget, since the
// stream carries their device state. They are prepared as a hotplug prepares them (the same
// operation, which the ordinary reconcile finds done once the guest runs here, the disk
// attached). A hotpluggable volume the source has not plugged yet is left to that reconcile.
// errStoragePreparing while an operation runs; an error names the volume that cannot be had
// here.
func (r *VMIReconciler) targetHotDisks(vmi *vmletv1.VirtualMachineInstance, want *translate.Desired, l *vmletv1.MigrationDomainLayout) ([]targetHot, error) {
	onSource := map[string]bool{}
	for _, d := range l.Devices {
		if d.Kind == "disk" {
			onSource[d.ID] = true
		}
	}
	var out []targetHot
	var preparing bool
	for _, hv := range want.HotplugVolumes {
		if hv.Err != nil {
			if onSource[storage.DiskID(hv.Name)] {
				return nil, fmt.Errorf("hot-plugged volume %s runs on the source but not here: %w", hv.Name, hv.Err)
			}
			continue
		}
		if len(hv.Plan.Disks) != 1 || !onSource[hv.Plan.Disks[0].ID] {
			continue
		}
		res, err := r.prepareHotplugVolume(vmi.UID, hv)
		switch {
		case errors.Is(err, errStoragePreparing):
			preparing = true
			continue
		case err != nil:
			return nil, fmt.Errorf("hot-plugged volume %s: storage: %w", hv.Name, err)
		case len(res.Disks) != 1:
			return nil, fmt.Errorf("hot-plugged volume %s: storage made %d disks, want 1", hv.Name, len(res.Disks))
		}
		out = append(out, targetHot{plan: hv.Plan, res: res, disk: res.Disks[0]})
	}
	if preparing {
		return nil, errStoragePreparing
	}
	return out, nil
}

// reviveAbsentNICs clears state: absent on the interfaces of vmi (the target's scratch copy)
// whose NIC the source's guest still has (l, its layout): set absent after the source published
// it, they were left in the guest (a source changes no NIC once the migration began), so the
// target's QEMU starts with them too, and once the guest runs here the ordinary reconcile, which
// reads the vmi itself, unplugs them. Pure.
func reviveAbsentNICs(vmi *vmletv1.VirtualMachineInstance, l *vmletv1.MigrationDomainLayout) {
	if l == nil {
		return
	}
	ifcs := vmi.Spec.Domain.Devices.Interfaces
	for i := range ifcs {
		id := translate.NICID(ifcs[i].Name)
		if ifcs[i].State == vmletv1.InterfaceStateAbsent && slices.ContainsFunc(l.Devices, func(d vmletv1.MigrationDevicePort) bool {
			return d.Kind == "nic" && d.ID == id
		}) {
			ifcs[i].State = ""
		}
	}
}

// targetHotNICs wires on a migration target the interfaces of secondary networks the source's
// guest has (the layout's NICs that are the vmi's multus interfaces): the target's QEMU starts
// with them, each pinned to its source port by translate.MigrationTarget, on a pod interface of
// this node that has the source's address and MAC (a network that spans the nodes), with its
// bridge binding; the DHCP service that goes with it is handed over with the others. The
// ordinary reconcile finds them plugged once the guest runs here. A multus interface the
// source has not plugged yet is left to it. It returns the NICs and the netns of their taps; an
// error wrapping errUnknownSecondary or network.ErrInvalidSpec cannot be had on this node.
func (r *VMIReconciler) targetHotNICs(vmi *vmletv1.VirtualMachineInstance, want *translate.Desired, l *vmletv1.MigrationDomainLayout) ([]qemu.NIC, string, error) {
	onSource := map[string]bool{}
	for _, d := range l.Devices {
		if d.Kind == "nic" {
			onSource[d.ID] = true
		}
	}
	var out []qemu.NIC
	var netns string
	for _, hot := range want.HotplugNICs {
		if !onSource[hot.NIC.ID] {
			continue
		}
		if r.Network == nil || r.Network.Pods == nil {
			return nil, "", fmt.Errorf("interface %s runs on the source: %w", hot.Name, errNoPodNetwork)
		}
		nic, ns, err := r.Network.plugSecondary(vmi.UID, want.Network, hot)
		if err != nil {
			return nil, "", fmt.Errorf("interface %s runs on the source: %w", hot.Name, err)
		}
		out, netns = append(out, nic), ns
	}
	return out, netns, nil
}
