package translate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage"
)

// TestTranslateErrors: every way a VMI fails to translate names its field, says why, and
// tells the reconciler's reason (Unsupported, InvalidSpec or storage's).
func TestTranslateErrors(t *testing.T) {
	withIface := func(ifc vmletv1.Interface, nets ...vmletv1.Network) func(*vmletv1.VirtualMachineInstance) {
		return func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{ifc}
			v.Spec.Networks = nets
		}
	}
	masq := func(f func(*vmletv1.Interface)) vmletv1.Interface {
		i := masqIface("default")
		f(&i)
		return i
	}
	podCIDR := func(v4, v6 string) vmletv1.Network {
		n := podNet("default")
		n.Pod.VMNetworkCIDR, n.Pod.VMIPv6NetworkCIDR = v4, v6
		return n
	}
	secretRef := func(name string) *vmletv1.LocalObjectReference { return &vmletv1.LocalObjectReference{Name: name} }
	tests := []struct {
		name   string
		mutate func(*vmletv1.VirtualMachineInstance)
		refs   Referenced
		want   errView
	}{
		// The domain.
		{name: "hook sidecar annotation", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Annotations = map[string]string{"hooks.kubevirt.io/hookSidecars": "[]"}
		}, want: errView{"metadata.annotations[hooks.kubevirt.io/hookSidecars]", "hook sidecars (vmlet has no libvirt domain XML to hook) are not supported", "Unsupported"}},
		{name: "tiny memory", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = qty("1k") },
			want: errView{"spec.domain.memory.guest", "1k is not a usable guest memory size", "InvalidSpec"}},
		{name: "efi not yet", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &vmletv1.Bootloader{EFI: &vmletv1.EFI{}}
		}, want: errView{"spec.domain.firmware.bootloader.efi", "EFI firmware is not supported yet (BIOS and kernelBoot are)", "Unsupported"}},
		{name: "smbios serial not yet", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.Serial = "S1" },
			want: errView{"spec.domain.firmware.serial", "SMBIOS serial is not supported yet", "Unsupported"}},
		{name: "machine type QEMU refuses", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Machine = &vmletv1.Machine{Type: "pc"} },
			want: errView{"spec", "validate spec: machine \"pc\": must be \"q35\" or \"pc-q35-X.Y\"", "InvalidSpec"}},

		// The kernel boot.
		{name: "kernel boot without a container", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container = nil },
			want: errView{"spec.domain.firmware.kernelBoot.container", "kernelBoot needs a container with the kernel", "InvalidSpec"}},
		{name: "kernel boot without a kernel path", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = "" },
			want: errView{"spec.domain.firmware.kernelBoot.container.kernelPath", "kernelBoot needs the kernel's path in the image", "InvalidSpec"}},
		{name: "invalid kernel image reference", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container.Image = "Bad Ref" },
			want: errView{"spec.domain.firmware.kernelBoot", "kernel boot: image: parse reference \"Bad Ref\": invalid image reference: could not parse reference: Bad Ref", "InvalidImageName"}},
		{name: "kernel args with a newline", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.KernelArgs = "console=ttyS0\n-device evil"
		}, want: errView{"spec.domain.firmware.kernelBoot.kernelArgs", "kernel boot: check disks: invalid disk: validate spec: boot.cmdline \"console=ttyS0\\n-device evil\": only printable ASCII is allowed", storage.ReasonInvalidVolume}},

		// Volumes and disks.
		{name: "volume without a source", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi"), {Name: "nothing"}}
		}, want: errView{"spec.volumes[1]", "volume \"nothing\" has no source", "InvalidSpec"}},
		{name: "host disk outside the root", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi"), {Name: "h", VolumeSource: vmletv1.VolumeSource{
				HostDisk: &vmletv1.HostDisk{Path: "/etc/shadow", Type: vmletv1.HostDiskExists}}}}
		}, want: errView{"spec.volumes[1]", "volume h: hostDisk \"/etc/shadow\" is not beneath /var/data: path outside the allowed root", storage.ReasonPathNotAllowed}},
		{name: "unknown claim", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{pvc("p", "nope", false)}
		}, want: errView{"spec.volumes[0]", "volume p: claim \"nope\": unknown claim", storage.ReasonVolumeNotFound}},
		{name: "claim of another namespace", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Namespace = "third"
			v.Spec.Volumes = []vmletv1.Volume{pvc("p", "base", false)}
		}, want: errView{"spec.volumes[0]", "volume p: claim \"base\": unknown claim", storage.ReasonVolumeNotFound}},
		{name: "serial QEMU cannot carry", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", Serial: strings.Repeat("s", 21)}}
		}, want: errView{"spec.domain.devices.disks", "kernel boot: check disks: invalid disk: validate spec: disks[0].serial \"sssssssssssssssssssss\": must be 1-20 of [A-Za-z0-9._-]", storage.ReasonInvalidVolume}},
		{name: "cdrom on virtio", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: vmletv1.DiskBusVirtio}}}}
		}, want: errView{"spec.domain.devices.disks", "kernel boot: check disks: invalid disk: validate spec: disks[0].bus \"virtio\": a cdrom needs the sata or scsi bus", storage.ReasonInvalidVolume}},
		{name: "lun on the sata bus", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi"), pvc("lun0", "blk", false)}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("a"), {Name: "lun0", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{Bus: vmletv1.DiskBusSATA}}}}
		}, want: errView{"spec.domain.devices.disks[1]", "volume lun0: disk: a lun needs the scsi bus, not sata: invalid disk", storage.ReasonInvalidVolume}},
		{name: "secret that was not read", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: secretRef("ud")})}
		}, want: errView{"spec.volumes[0].cloudInitNoCloud.secretRef", "secret \"ud\" was not read", "InvalidSpec"}},
		{name: "image pull secret that was not read", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.ImagePullSecret = "kpull"
		}, want: errView{"spec.domain.firmware.kernelBoot.container.imagePullSecret", "image pull secret \"kpull\" was not read", "InvalidSpec"}},
		{name: "secret without user data", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: secretRef("ud")})}
		}, refs: Referenced{Secrets: map[string]map[string][]byte{"ud": {"other": nil}}},
			want: errView{"spec.volumes[0].cloudInitNoCloud.secretRef", "secret \"ud\" has none of the keys [\"userdata\" \"userData\"]", "InvalidSpec"}},
		{name: "config drive network data secret without network data", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "cd", VolumeSource: vmletv1.VolumeSource{CloudInitConfigDrive: &vmletv1.CloudInitConfigDriveSource{
				CloudInitData: vmletv1.CloudInitData{UserData: "x", NetworkDataSecretRef: secretRef("nd")}}}}}
		}, refs: Referenced{Secrets: map[string]map[string][]byte{"nd": {"userdata": nil}}},
			want: errView{"spec.volumes[0].cloudInitConfigDrive.networkDataSecretRef", "secret \"nd\" has none of the keys [\"networkdata\" \"networkData\"]", "InvalidSpec"}},
		{name: "ephemeral without a claim", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "e", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{}}}}
		}, want: errView{"spec.volumes[0].ephemeral.persistentVolumeClaim", "volume \"e\": ephemeral needs a persistentVolumeClaim", "InvalidSpec"}},
		{name: "fixed PCI address", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{PciAddress: "0000:81:01.1"}}}}
		}, want: errView{"spec.domain.devices.disks[0].disk.pciAddress", "disk \"a\": a fixed PCI address is not supported yet", "Unsupported"}},
		{name: "dedicated I/O thread", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", DedicatedIOThread: ptr.To(true)}}
		}, want: errView{"spec.domain.devices.disks[0].dedicatedIOThread", "disk \"a\": a dedicated I/O thread is not supported yet", "Unsupported"}},
		{name: "writable cdrom", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{ReadOnly: ptr.To(false)}}}}
		}, want: errView{"spec.domain.devices.disks[0].cdrom.readonly", "disk \"ci\": a writable cdrom is not supported yet", "Unsupported"}},
		{name: "open tray", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Tray: vmletv1.TrayStateOpen}}}}
		}, want: errView{"spec.domain.devices.disks[0].cdrom.tray", "disk \"ci\": an open cdrom tray is not supported yet", "Unsupported"}},
		{name: "two cloud-init volumes", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("a", vmletv1.CloudInitData{UserData: "x"}), noCloud("b", vmletv1.CloudInitData{UserData: "y"})}
		}, want: errView{"spec.volumes[1]", "volume b: a second cloud-init volume: invalid volume", storage.ReasonInvalidVolume}},

		// Interfaces and networks.
		{name: "e1000 model", mutate: withIface(masq(func(i *vmletv1.Interface) { i.Model = "e1000" }), podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].model", "interface \"default\": model e1000 is not supported (virtio is)", "Unsupported"}},
		{name: "pci address", mutate: withIface(masq(func(i *vmletv1.Interface) { i.PciAddress = "0000:81:01.1" }), podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].pciAddress", "interface \"default\": fixed PCI addresses are not supported", "Unsupported"}},
		{name: "non-pod network", mutate: withIface(masqIface("default"), vmletv1.Network{Name: "default"}),
			want: errView{"spec.networks[0]", "network \"default\": only pod and multus networks are supported", "Unsupported"}},
		{name: "interface without its network", mutate: withIface(masqIface("default")),
			want: errView{"spec.domain.devices.interfaces[0].name", "\"default\": unknown network: no network of this name", "InvalidSpec"}},
		{name: "interface without its network, no binding", mutate: withIface(vmletv1.Interface{Name: "default"}),
			want: errView{"spec.domain.devices.interfaces[0].name", "\"default\": unknown network: no network of this name", "InvalidSpec"}},
		{name: "network without an interface", mutate: withIface(masqIface("default"), podNet("default"), podNet("other")),
			want: errView{"spec.networks[1].name", "network \"other\" has no interface of its name", "InvalidSpec"}},
		{name: "ports on a bridge binding", mutate: withIface(vmletv1.Interface{Name: "default", Ports: []vmletv1.Port{{Port: 80}}}, podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].ports", "\"1\": unsupported binding: ports need the masquerade binding", "InvalidSpec"}},
		{name: "port listed twice", mutate: withIface(masq(func(i *vmletv1.Interface) {
			i.Ports = []vmletv1.Port{{Port: 80}, {Port: 80, Protocol: vmletv1.ProtocolTCP}}
		}), podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].ports[1].port", "\"TCP/80\": invalid port: listed twice", "InvalidSpec"}},
		{name: "macAddress that is no MAC", mutate: withIface(masq(func(i *vmletv1.Interface) { i.MacAddress = "02:00:00:00:00" }), podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].macAddress", "interface \"default\": parse mac \"02:00:00:00:00\": invalid mac address: want 6 hex pairs separated by ':' or '-'", "InvalidSpec"}},
		{name: "multicast MAC", mutate: withIface(masq(func(i *vmletv1.Interface) { i.MacAddress = "01:00:5e:00:00:01" }), podNet("default")),
			want: errView{"spec.domain.devices.interfaces[0].macAddress", "interface \"default\": parse mac \"01:00:5e:00:00:01\": invalid mac address: multicast bit set", "InvalidSpec"}},
		{name: "two pod networks", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("a"), masqIface("b")}
			v.Spec.Networks = []vmletv1.Network{podNet("a"), podNet("b")}
		}, want: errView{"spec.networks[1]", "\"b\": duplicate interface: only one pod network", "InvalidSpec"}},
		{name: "guest CIDR that is no CIDR", mutate: withIface(masqIface("default"), podCIDR("10.0.2.0", "")),
			want: errView{"spec.networks[0].pod.vmNetworkCIDR", "\"10.0.2.0\" is not a CIDR", "InvalidSpec"}},
		{name: "guest IPv6 CIDR that is no CIDR", mutate: withIface(masqIface("default"), podCIDR("", "fd10::/200")),
			want: errView{"spec.networks[0].pod.vmIPv6NetworkCIDR", "\"fd10::/200\" is not a CIDR", "InvalidSpec"}},
		{name: "bad guest CIDR", mutate: withIface(masqIface("default"), podCIDR("10.0.2.0/31", "")),
			want: errView{"spec.networks[0].pod.vmNetworkCIDR", "\"10.0.2.0/31\": invalid network spec: want an IPv4 network of at most /30", "InvalidSpec"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.mutate(vmi)
			got, err := Translate(vmi, storageTestEnv(), tt.refs)
			if err == nil {
				t.Fatalf("Translate = %+v, want an error", got)
			}
			if diff := cmp.Diff(&tt.want, viewErr(t, err)); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
