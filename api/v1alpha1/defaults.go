package v1alpha1

// KubeVirt's mutating webhook writes defaults into the object at creation. vmlet has no webhook
// and keeps the spec as the user wrote it; the functions here compute the same defaults when the
// spec is read, so every consumer applies them identically. They never modify their argument.

// Default buses, as in KubeVirt on x86 q35.
const (
	DefaultDiskBus  = DiskBusVirtio
	DefaultCDRomBus = DiskBusSATA
	DefaultLunBus   = DiskBusSCSI
)

// DefaultNetworkName names the pod network and interface that are attached when the spec has
// neither interfaces nor networks (unless autoattachPodInterface is false).
const DefaultNetworkName = "default"

// BindingMethod is how an interface is connected to its network.
type BindingMethod string

// Binding methods.
const (
	BindingBridge     BindingMethod = "bridge"
	BindingMasquerade BindingMethod = "masquerade"
)

// Binding returns the interface's binding method; an interface with none set is bridge, the
// default of KubeVirt's network configuration.
func (i *Interface) Binding() BindingMethod {
	if i.Masquerade != nil {
		return BindingMasquerade
	}
	return BindingBridge
}

// Hotpluggable reports whether the volume may be added to or removed from a running vmi.
func (v *Volume) Hotpluggable() bool {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.Hotpluggable
	case v.DataVolume != nil:
		return v.DataVolume.Hotpluggable
	}
	return false
}

// EffectiveDisks returns the disks the guest gets: the spec's disks with their device type and
// bus defaulted (a disk with no target is a virtio disk; cdroms default to sata, luns to scsi),
// followed by a virtio disk for each volume that has no disk of its name, in volume order.
func EffectiveDisks(spec *VirtualMachineInstanceSpec) []Disk {
	named := make(map[string]bool, len(spec.Domain.Devices.Disks))
	disks := make([]Disk, 0, len(spec.Volumes))
	for i := range spec.Domain.Devices.Disks {
		d := spec.Domain.Devices.Disks[i].DeepCopy()
		named[d.Name] = true
		switch {
		case d.CDRom != nil:
			if d.CDRom.Bus == "" {
				d.CDRom.Bus = DefaultCDRomBus
			}
		case d.LUN != nil:
			if d.LUN.Bus == "" {
				d.LUN.Bus = DefaultLunBus
			}
		case d.Disk != nil:
			if d.Disk.Bus == "" {
				d.Disk.Bus = DefaultDiskBus
			}
		default:
			d.Disk = &DiskTarget{Bus: DefaultDiskBus}
		}
		disks = append(disks, *d)
	}
	for _, v := range spec.Volumes {
		if !named[v.Name] {
			disks = append(disks, Disk{Name: v.Name, DiskDevice: DiskDevice{Disk: &DiskTarget{Bus: DefaultDiskBus}}})
		}
	}
	return disks
}

// EffectiveNetworks returns the interfaces and networks the guest gets: the spec's, or, when
// the spec has neither and autoattachPodInterface is not false, one bridge interface on the pod
// network, both named "default", as KubeVirt does.
func EffectiveNetworks(spec *VirtualMachineInstanceSpec) ([]Interface, []Network) {
	devices := &spec.Domain.Devices
	if len(devices.Interfaces) == 0 && len(spec.Networks) == 0 &&
		(devices.AutoattachPodInterface == nil || *devices.AutoattachPodInterface) {
		return []Interface{{
				Name:                   DefaultNetworkName,
				InterfaceBindingMethod: InterfaceBindingMethod{Bridge: &InterfaceBridge{}},
			}}, []Network{{
				Name:          DefaultNetworkName,
				NetworkSource: NetworkSource{Pod: &PodNetwork{}},
			}}
	}
	ifaces := make([]Interface, len(devices.Interfaces))
	for i := range devices.Interfaces {
		devices.Interfaces[i].DeepCopyInto(&ifaces[i])
	}
	nets := make([]Network, len(spec.Networks))
	for i := range spec.Networks {
		spec.Networks[i].DeepCopyInto(&nets[i])
	}
	return ifaces, nets
}
