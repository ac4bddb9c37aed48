package controllers

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu"
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

// TestDeferredNICs: what a migration's source leaves to the node the guest runs on after it —
// the hot-plugged interfaces not attached yet, and the attached NICs the spec no longer wants
// (set absent, or gone from the spec) — never a boot NIC.
func TestDeferredNICs(t *testing.T) {
	ifc := func(name string, st vmletv1.InterfaceState) vmletv1.Interface {
		return vmletv1.Interface{Name: name, State: st}
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{ifc("default", ""), ifc("blue", vmletv1.InterfaceStateAbsent), ifc("green", ""), ifc("red", "")}
	hot := func(name string) translate.HotNIC {
		return translate.HotNIC{Name: name, NIC: qemu.NIC{ID: translate.NICID(name)}}
	}
	want := &translate.Desired{Spec: &qemu.Spec{NICs: []qemu.NIC{{ID: translate.NICID("default")}}},
		HotplugNICs: []translate.HotNIC{hot("green"), hot("red")}}
	attached := []string{translate.NICID("default"), translate.NICID("red"), translate.NICID("blue"), "net-gone"}
	plug, unplug := deferredNICs(vmi, attached, want)
	if diff := cmp.Diff([]string{"green"}, plug); diff != "" {
		t.Errorf("plug (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"blue", "(NIC net-gone)"}, unplug); diff != "" {
		t.Errorf("unplug (-want +got):\n%s", diff)
	}
	if plug, unplug := deferredNICs(vmi, []string{translate.NICID("default"), translate.NICID("green"), translate.NICID("red")}, want); plug != nil || unplug != nil {
		t.Errorf("nothing to change: plug %v, unplug %v", plug, unplug)
	}
}

// TestReviveAbsentNICs: a target's scratch copy gets back the interfaces set absent whose NIC
// the source's guest still has; others stay absent, present ones are untouched.
func TestReviveAbsentNICs(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default"},
		{Name: "blue", State: vmletv1.InterfaceStateAbsent}, {Name: "red", State: vmletv1.InterfaceStateAbsent}}
	layout := &vmletv1.MigrationDomainLayout{Devices: []vmletv1.MigrationDevicePort{
		{Kind: "nic", ID: translate.NICID("default")}, {Kind: "nic", ID: translate.NICID("blue")}, {Kind: "disk", ID: translate.NICID("red")}}}
	reviveAbsentNICs(vmi, nil)
	reviveAbsentNICs(vmi, layout)
	var got []string
	for _, i := range vmi.Spec.Domain.Devices.Interfaces {
		got = append(got, i.Name+":"+string(i.State))
	}
	if diff := cmp.Diff([]string{"default:", "blue:", "red:absent"}, got); diff != "" {
		t.Errorf("interfaces (-want +got):\n%s", diff)
	}
}
