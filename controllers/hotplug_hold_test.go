package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// TestHoldHotplug: while the vmi migrates away, hotpluggable volumes already attached keep
// their status (none is given), the others wait for the migration, failed ones included;
// volumes attached at boot are not its business.
func TestHoldHotplug(t *testing.T) {
	claim := func(name string, hot bool) vmletv1.Volume {
		return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: name}, Hotpluggable: hot}}}
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []vmletv1.Volume{claim("boot", false), claim("attached", true), claim("failed", true), claim("new", true)}
	vmi.Status.VolumeStatus = []vmletv1.VolumeStatus{
		{Name: "boot", Phase: vmletv1.VolumeReady},
		{Name: "attached", Phase: vmletv1.VolumeReady},
		{Name: "failed", Phase: vmletv1.VolumePending, Reason: string(vmistatus.ReasonHotplugFailed)},
	}
	wait := volumeState{vmletv1.VolumePending, vmistatus.ReasonHotplugAfterMigration,
		"the VMI is migrating: the volume is attached on the node it runs on once the migration ended"}
	if diff := cmp.Diff(map[string]volumeState{"failed": wait, "new": wait}, holdHotplug(vmi), cmp.AllowUnexported(volumeState{})); diff != "" {
		t.Errorf("holdHotplug (-want +got):\n%s", diff)
	}
}
