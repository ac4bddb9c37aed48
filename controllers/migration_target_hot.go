package controllers

import (
	"errors"
	"fmt"

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
