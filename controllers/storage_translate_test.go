package controllers

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/storage"
)

// Volume sources and disk helpers for the table below.
func containerDisk(name, image string) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: image}}}
}

func emptyDisk(name, size string) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse(size)}}}
}

func pvc(name, claim string, hot bool) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: claim}, Hotpluggable: hot}}}
}

func noCloud(name string, d vmletv1.CloudInitData) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{CloudInitData: d}}}
}

func virtioDisk(name string) vmletv1.Disk {
	return vmletv1.Disk{Name: name, DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusVirtio}}}
}

// storageTestEnv provides claims "data" (any namespace), "default/base" and a host disk root.
func storageTestEnv() NodeEnv {
	e := testEnv()
	e.Storage = StorageEnv{
		HostDiskRoot: "/var/data",
		Claims: map[string]storage.Claim{
			"data":         {Path: "/claims/data"},
			"default/base": {Path: "/claims/base"},
			"other/base":   {Path: "/claims/other-base"},
			"blk":          {Path: "/dev/vg0/blk", Mode: storage.Block},
		},
		ImageSources: map[string]string{"registry:5000/kubevirt/cirros:devel": "127.0.0.1:5000/kubevirt/cirros:devel"},
	}
	return e
}

// renderDisk is a disk in a line: id path format bus flags.
func renderDisks(dom *Domain) []string {
	var out []string
	for _, d := range dom.Spec.Disks {
		s := fmt.Sprintf("%s %s %s %s", d.ID, d.Path, d.Format, d.Bus)
		if d.ReadOnly {
			s += " ro"
		}
		if d.CDROM {
			s += " cdrom"
		}
		if d.Serial != "" {
			s += " serial=" + d.Serial
		}
		if d.BootIndex != 0 {
			s += fmt.Sprintf(" boot=%d", d.BootIndex)
		}
		if d.Cache != "" || d.AIO != "" {
			s += fmt.Sprintf(" cache=%s aio=%s", d.Cache, d.AIO)
		}
		out = append(out, s)
	}
	return out
}

// renderActions is the storage plan in lines: kind volume path and what the kind uses.
func renderActions(p *storage.VMPlan) []string {
	var out []string
	for _, a := range p.Actions {
		s := fmt.Sprintf("%s %s %s", a.Kind, a.Volume, a.Path)
		switch a.Kind {
		case storage.ActPull:
			s = fmt.Sprintf("pull %s %s", a.Image, a.PullPolicy)
		case storage.ActOverlay:
			s += " over " + a.Image + a.Backing
		case storage.ActEmpty:
			s += fmt.Sprintf(" %d", a.SizeBytes)
		case storage.ActHostPath:
			if a.Create {
				s += fmt.Sprintf(" create %d", a.SizeBytes)
			}
		case storage.ActISO:
			s += fmt.Sprintf(" %s user-data=%q", a.CloudInit.Kind, a.CloudInit.UserData)
		case storage.ActLinkKernel:
			s += " from " + a.Image + ":" + a.ImagePath + " initrd " + a.Initrd
		}
		out = append(out, s)
	}
	return out
}

func TestDomainSpecVolumes(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		refs    Referenced
		disks   []string // want Spec.Disks, rendered
		actions []string // want Storage.Actions, rendered; nil: not checked
	}{
		{name: "kernel boot only", disks: nil, actions: []string{
			"pull guest:1 IfNotPresent",
			"link-kernel  /vols/u1/boot/kernel from guest:1:/vmlinuz initrd /vols/u1/boot/initrd",
		}},
		{name: "kubevirt vmi-nocloud (containerDisk, NoCloud, emptyDisk) with a mirrored image", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware = nil
			v.Spec.Volumes = []vmletv1.Volume{containerDisk("containerdisk", "registry:5000/kubevirt/cirros:devel"),
				noCloud("cloudinitdisk", vmletv1.CloudInitData{UserData: "#!/bin/sh\necho hi\n"}), emptyDisk("emptydisk", "2Gi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("containerdisk"), virtioDisk("cloudinitdisk"), virtioDisk("emptydisk")}
		}, disks: []string{
			"containerdisk /vols/u1/disks/containerdisk.qcow2 qcow2 virtio boot=1",
			"cloudinitdisk /vols/u1/disks/cloudinitdisk.iso raw virtio",
			"emptydisk /vols/u1/disks/emptydisk.qcow2 qcow2 virtio",
		}, actions: []string{
			"pull 127.0.0.1:5000/kubevirt/cirros:devel IfNotPresent",
			"create-overlay containerdisk /vols/u1/disks/containerdisk.qcow2 over 127.0.0.1:5000/kubevirt/cirros:devel",
			`build-iso cloudinitdisk /vols/u1/disks/cloudinitdisk.iso NoCloud user-data="#!/bin/sh\necho hi\n"`,
			"create-empty emptydisk /vols/u1/disks/emptydisk.qcow2 2147483648",
		}},
		{name: "volumes without disks get virtio disks in volume order", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("b", "1Mi"), emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("a")}
		}, disks: []string{"a /vols/u1/disks/a.qcow2 qcow2 virtio boot=1", "b /vols/u1/disks/b.qcow2 qcow2 virtio"}},
		{name: "cdrom, lun and disk options", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"}), pvc("lun0", "blk", false), pvc("data", "data", false)}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{
				{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{}}},
				{Name: "lun0", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{ReadOnly: true}}},
				{Name: "data", BootOrder: ptr.To[uint](1), Serial: "D1", Cache: vmletv1.CacheNone, IO: vmletv1.IONative,
					DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSCSI, ReadOnly: true}}},
			}
		}, disks: []string{
			"ci /vols/u1/disks/ci.iso raw sata ro cdrom",
			"lun0 /dev/vg0/blk raw scsi ro",
			"data /claims/data/disk.img raw scsi ro serial=D1 boot=1 cache=none aio=native",
		}},
		{name: "claims resolve in the VMI's namespace first", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{pvc("base", "base", false)}
		}, disks: []string{"base /claims/base/disk.img raw virtio boot=1"}},
		{name: "dataVolume, ephemeral and hostDisk", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{
				{Name: "dv", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "data"}}},
				{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
					PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base"}}}},
				{Name: "host-disk", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{
					Path: "/var/data/disk.img", Type: vmletv1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}},
			}
		}, disks: []string{
			"dv /claims/data/disk.img raw virtio boot=1",
			"eph /vols/u1/disks/eph.qcow2 qcow2 virtio",
			"host-disk /var/data/disk.img raw virtio",
		}, actions: []string{
			"pull guest:1 IfNotPresent",
			"use-host-path dv /claims/data/disk.img",
			"create-overlay eph /vols/u1/disks/eph.qcow2 over /claims/base/disk.img",
			"use-host-path host-disk /var/data/disk.img create 1073741824",
			"link-kernel  /vols/u1/boot/kernel from guest:1:/vmlinuz initrd /vols/u1/boot/initrd",
		}},
		{name: "cloud-init user data from a secret", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: "ud"}})}
		}, refs: Referenced{Secrets: map[string]map[string][]byte{"ud": {"userData": []byte("#cloud-config\n")}}},
			disks: []string{"ci /vols/u1/disks/ci.iso raw virtio boot=1"}, actions: []string{
				"pull guest:1 IfNotPresent",
				`build-iso ci /vols/u1/disks/ci.iso NoCloud user-data="#cloud-config\n"`,
				"link-kernel  /vols/u1/boot/kernel from guest:1:/vmlinuz initrd /vols/u1/boot/initrd",
			}},
		{name: "kernel image pull policy and :latest default", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.Image = "guest:latest"
			v.Spec.Volumes = []vmletv1.Volume{containerDisk("root", "guest:2")}
			v.Spec.Volumes[0].ContainerDisk.ImagePullPolicy = vmletv1.PullNever
		}, disks: []string{"root /vols/u1/disks/root.qcow2 qcow2 virtio boot=1"}, actions: []string{
			"pull guest:2 Never",
			"pull guest:latest Always",
			"create-overlay root /vols/u1/disks/root.qcow2 over guest:2",
			"link-kernel  /vols/u1/boot/kernel from guest:latest:/vmlinuz initrd /vols/u1/boot/initrd",
		}},
		{name: "hotpluggable volumes are not attached at boot", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("scratch", "1Mi"), pvc("hot", "data", true)}
		}, disks: []string{"scratch /vols/u1/disks/scratch.qcow2 qcow2 virtio boot=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			dom, err := DomainSpec(vmi, storageTestEnv(), tt.refs)
			if err != nil {
				t.Fatalf("DomainSpec: %v", err)
			}
			if got := renderDisks(dom); !slices.Equal(got, tt.disks) {
				t.Errorf("disks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.disks, "\n"))
			}
			if got := renderActions(dom.Storage); tt.actions != nil && !slices.Equal(got, tt.actions) {
				t.Errorf("actions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.actions, "\n"))
			}
		})
	}
}

func TestDomainSpecVolumeErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*vmletv1.VirtualMachineInstance)
		refs   Referenced
		want   error  // ErrUnsupported or errInvalid
		field  string // of the *SpecError
		reason string // specReason: the VMI's reason
	}{
		{name: "host disk outside the root", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi"), {Name: "h", VolumeSource: vmletv1.VolumeSource{
				HostDisk: &vmletv1.HostDisk{Path: "/etc/shadow", Type: vmletv1.HostDiskExists}}}}
		}, want: errInvalid, field: "spec.volumes[1]", reason: storage.ReasonPathNotAllowed},
		{name: "unknown claim", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{pvc("p", "nope", false)}
		}, want: errInvalid, field: "spec.volumes[0]", reason: storage.ReasonVolumeNotFound},
		{name: "claim of another namespace", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Namespace = "third"
			v.Spec.Volumes = []vmletv1.Volume{pvc("p", "base", false)}
		}, want: errInvalid, field: "spec.volumes[0]", reason: storage.ReasonVolumeNotFound},
		{name: "serial QEMU cannot carry", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", Serial: strings.Repeat("s", 21)}}
		}, want: errInvalid, field: "spec.domain.devices.disks", reason: storage.ReasonInvalidVolume},
		{name: "secret without user data", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: "ud"}})}
		}, refs: Referenced{Secrets: map[string]map[string][]byte{"ud": {"other": nil}}},
			want: errInvalid, field: "spec.volumes[0].cloudInitNoCloud.secretRef", reason: "InvalidSpec"},
		{name: "ephemeral without a claim", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "e", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{}}}}
		}, want: errInvalid, field: "spec.volumes[0].ephemeral.persistentVolumeClaim", reason: "InvalidSpec"},
		{name: "fixed PCI address", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{PciAddress: "0000:81:01.1"}}}}
		}, want: ErrUnsupported, field: "spec.domain.devices.disks[0].disk.pciAddress", reason: "Unsupported"},
		{name: "dedicated I/O thread", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "a", DedicatedIOThread: ptr.To(true)}}
		}, want: ErrUnsupported, field: "spec.domain.devices.disks[0].dedicatedIOThread", reason: "Unsupported"},
		{name: "writable cdrom", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{ReadOnly: ptr.To(false)}}}}
		}, want: ErrUnsupported, field: "spec.domain.devices.disks[0].cdrom.readonly", reason: "Unsupported"},
		{name: "open tray", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Tray: vmletv1.TrayStateOpen}}}}
		}, want: ErrUnsupported, field: "spec.domain.devices.disks[0].cdrom.tray", reason: "Unsupported"},
		{name: "two cloud-init volumes", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("a", vmletv1.CloudInitData{UserData: "x"}), noCloud("b", vmletv1.CloudInitData{UserData: "y"})}
		}, want: errInvalid, field: "spec.volumes[1]", reason: storage.ReasonInvalidVolume},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			tt.mutate(vmi)
			_, err := DomainSpec(vmi, storageTestEnv(), tt.refs)
			checkSpecError(t, err, tt.want, tt.field)
			if got := string(specReason(err)); got != tt.reason {
				t.Errorf("reason = %q, want %q (%v)", got, tt.reason, err)
			}
		})
	}
}

// TestDomainSpecHotplugVolumes: a hotpluggable volume is planned alone, and one that cannot be
// attached is reported on its own without failing the VMI.
func TestDomainSpecHotplugVolumes(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Volumes = []vmletv1.Volume{pvc("hot", "data", true), pvc("gone", "nope", true), pvc("sata", "data", true)}
	vmi.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "hot", Serial: "hot"}, virtioDisk("gone"),
		{Name: "sata", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSATA}}}}
	dom, err := DomainSpec(vmi, storageTestEnv(), Referenced{})
	if err != nil {
		t.Fatalf("DomainSpec: %v", err)
	}
	if len(dom.Spec.Disks) != 0 {
		t.Errorf("hotpluggable volumes attached at boot: %v", renderDisks(dom))
	}
	if len(dom.Hotplug) != 3 {
		t.Fatalf("hotplug volumes: %+v", dom.Hotplug)
	}
	hot := dom.Hotplug[0]
	if hot.Err != nil || len(hot.Plan.Disks) != 1 || len(hot.Plan.Actions) != 1 {
		t.Fatalf("hot: %+v", hot)
	}
	if d := hot.Plan.Disks[0]; d.ID != "hot" || d.Path != "/claims/data/disk.img" || d.Serial != "hot" || d.Bus != "virtio" {
		t.Errorf("hot disk: %+v", d)
	}
	if gone := dom.Hotplug[1]; gone.Plan != nil || specReason(gone.Err) != storage.ReasonVolumeNotFound {
		t.Errorf("unknown claim: %+v (reason %s)", gone, specReason(gone.Err))
	}
	if sata := dom.Hotplug[2]; sata.Plan != nil || !errors.Is(sata.Err, ErrUnsupported) {
		t.Errorf("sata hotplug: %+v", sata)
	}
}
