package migration

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Reasons of LiveMigratable=False: KubeVirt's strings, plus one of vmlet's.
const (
	ReasonDisksNotMigratable     = "DisksNotLiveMigratable"
	ReasonInterfaceNotMigratable = "InterfaceNotLiveMigratable"
	ReasonCPUModeNotMigratable   = "CPUModeLiveMigratable" // sic: KubeVirt's value
	// ReasonHostDeviceNotMigratable never applies today: the API refuses host devices.
	ReasonHostDeviceNotMigratable = "HostDeviceNotLiveMigratable"
	// ReasonHotplugNotMigratable is vmlet's: a disk or NIC plugged into the running guest
	// cannot be reproduced on a target yet.
	ReasonHotplugNotMigratable = "HotplugNotLiveMigratable"
	// ReasonMigratable is LiveMigratable=True's reason.
	ReasonMigratable = "Migratable"
)

// Verdict is whether a vmi can be live-migrated, and why not.
type Verdict struct {
	OK      bool
	Reason  string
	Message string
	// Method says how its disks move: BlockMigration when node-local ones are copied.
	Method vmletv1.VirtualMachineInstanceMigrationMethod
}

// Migratable decides LiveMigratable from the vmi's spec (and its hotplug status). Node-local
// disks the migration copies (containerDisk and emptyDisk overlays) and media rebuilt on the
// target (cloud-init, kernel boot files) are fine, and so are claims bound ReadWriteMany
// (shared); other claims and unshared hostDisks are not (vmlet does not copy them); a bridge binding on the pod network
// is not (the guest holds the pod's address, which the target pod does not have); neither is a
// host CPU model or a host device. Pure.
func Migratable(vmi *vmletv1.VirtualMachineInstance) Verdict {
	copied := false
	for _, v := range vmi.Spec.Volumes {
		switch {
		case v.HostDisk != nil:
			if v.HostDisk.Shared == nil || !*v.HostDisk.Shared {
				return no(ReasonDisksNotMigratable, "hostDisk %s is not shared between nodes (hostDisk.shared: true says it is)", v.Name)
			}
		case v.PersistentVolumeClaim != nil, v.DataVolume != nil:
			if verdict, ok := claimMigratable(vmi, v); !ok {
				return verdict
			}
		case v.Ephemeral != nil:
			return no(ReasonDisksNotMigratable, "cannot migrate: ephemeral volume %s lies over a node-local claim", v.Name)
		case v.ContainerDisk != nil, v.EmptyDisk != nil:
			copied = true
		}
	}
	ifaces, nets := vmletv1.EffectiveNetworks(&vmi.Spec) // with KubeVirt's auto-attached bridge
	pod := map[string]bool{}
	for _, n := range nets {
		if n.Pod != nil {
			pod[n.Name] = true
		}
	}
	for _, i := range ifaces {
		if i.Bridge != nil && pod[i.Name] {
			return no(ReasonInterfaceNotMigratable, "cannot migrate VMI which does not use masquerade to connect to the pod network (interface %s uses a bridge binding)", i.Name)
		}
	}
	if c := vmi.Spec.Domain.CPU; c != nil && c.Model == "host-passthrough" {
		return no(ReasonCPUModeNotMigratable, "cannot migrate a VMI with cpu model host-passthrough: the target's CPU may differ")
	}
	if hotplugged(vmi) {
		return no(ReasonHotplugNotMigratable, "cannot migrate yet: a disk or interface was hotplugged into the running guest")
	}
	v := Verdict{OK: true, Reason: ReasonMigratable, Method: vmletv1.LiveMigration}
	if copied {
		v.Method = vmletv1.BlockMigration
	}
	return v
}

// claimMigratable decides a persistentVolumeClaim or dataVolume volume: a claim whose bound
// access modes (status.volumeStatus[].persistentVolumeClaimInfo, recorded in cluster mode) say
// ReadWriteMany is shared between nodes and needs no copy; a ReadWriteOnce one is not, with
// KubeVirt's message; one with no recorded modes is a node-local claim (local mode's --claim).
func claimMigratable(vmi *vmletv1.VirtualMachineInstance, v vmletv1.Volume) (Verdict, bool) {
	what, name := "claim", ""
	if v.PersistentVolumeClaim != nil {
		name = v.PersistentVolumeClaim.ClaimName
	} else {
		what, name = "dataVolume", v.DataVolume.Name
	}
	for _, s := range vmi.Status.VolumeStatus {
		if s.Name != v.Name || s.PersistentVolumeClaimInfo == nil {
			continue
		}
		if slices.Contains(s.PersistentVolumeClaimInfo.AccessModes, corev1.ReadWriteMany) {
			return Verdict{}, true
		}
		return no(ReasonDisksNotMigratable, "cannot migrate VMI: PVC %s is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)", name), false
	}
	return no(ReasonDisksNotMigratable, "cannot migrate: %s %s is node-local here (vmlet does not copy or share claims yet)", what, name), false
}

func no(reason, format string, args ...any) Verdict {
	return Verdict{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// hotplugged reports whether the running guest has (or gets) hotplugged devices: volumes the
// status says were hotplugged, and the interfaces of secondary (multus) networks, which the
// agent always hot-plugs.
func hotplugged(vmi *vmletv1.VirtualMachineInstance) bool {
	for _, n := range vmi.Spec.Networks {
		if n.Multus != nil {
			return true
		}
	}
	for _, s := range vmi.Status.VolumeStatus {
		if s.HotplugVolume != nil {
			return true
		}
	}
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.Hotpluggable {
			return true
		}
	}
	return false
}
