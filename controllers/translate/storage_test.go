package translate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

// TestTranslateVolumes compares the whole storage plan; the domain's disks and kernel are the
// plan's.
func TestTranslateVolumes(t *testing.T) {
	kernel := qemu.Boot{Kernel: "/vols/u1/boot/kernel", Initrd: "/vols/u1/boot/initrd", Cmdline: "console=ttyS0"}
	file := func(id, path string, format qemu.DiskFormat) qemu.Disk {
		return qemu.Disk{ID: id, Path: path, Format: format, Bus: qemu.BusVirtio}
	}
	booting := func(d qemu.Disk) qemu.Disk { d.BootIndex = 1; return d }
	iso := func(vol, userData string) storage.Action {
		return storage.Action{Kind: storage.ActISO, Volume: vol, Path: "/vols/u1/disks/" + vol + ".iso", CloudInit: &cloudinit.Config{
			Kind: cloudinit.NoCloud, UserData: []byte(userData), Meta: cloudinit.MetaData{InstanceID: "demo.default", Hostname: "demo"}}}
	}
	empty := func(vol string, size int64) storage.Action {
		return storage.Action{Kind: storage.ActEmpty, Volume: vol, Path: "/vols/u1/disks/" + vol + ".qcow2", SizeBytes: size}
	}
	claim := func(vol, dir string) storage.Action {
		return storage.Action{Kind: storage.ActHostPath, Volume: vol, Path: dir + "/disk.img", Root: dir}
	}
	tests := []struct {
		name   string
		mutate func(*vmletv1.VirtualMachineInstance)
		refs   Referenced
		want   *storage.VMPlan // VMDir is testVolumeDir
	}{
		{name: "kernel boot only", want: &storage.VMPlan{Actions: []storage.Action{pullGuest1, linkGuest1}, DiskVolumes: map[string]string{}, Boot: kernel}},
		{name: "kubevirt vmi-nocloud (containerDisk, NoCloud, emptyDisk) with a mirrored image", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware = nil
			v.Spec.Volumes = []vmletv1.Volume{containerDisk("containerdisk", "registry:5000/kubevirt/cirros:devel"),
				noCloud("cloudinitdisk", vmletv1.CloudInitData{UserData: "#!/bin/sh\necho hi\n"}), emptyDisk("emptydisk", "2Gi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("containerdisk"), virtioDisk("cloudinitdisk"), virtioDisk("emptydisk")}
		}, want: &storage.VMPlan{
			Actions: []storage.Action{
				{Kind: storage.ActPull, Volume: "containerdisk", Image: "127.0.0.1:5000/kubevirt/cirros:devel", PullPolicy: oci.PullIfNotPresent},
				{Kind: storage.ActOverlay, Volume: "containerdisk", Path: "/vols/u1/disks/containerdisk.qcow2", Image: "127.0.0.1:5000/kubevirt/cirros:devel"},
				iso("cloudinitdisk", "#!/bin/sh\necho hi\n"),
				empty("emptydisk", 2<<30),
			},
			Disks: []qemu.Disk{
				booting(file("containerdisk", "/vols/u1/disks/containerdisk.qcow2", qemu.FormatQCOW2)),
				file("cloudinitdisk", "/vols/u1/disks/cloudinitdisk.iso", qemu.FormatRaw),
				file("emptydisk", "/vols/u1/disks/emptydisk.qcow2", qemu.FormatQCOW2),
			},
			DiskVolumes: map[string]string{"containerdisk": "containerdisk", "cloudinitdisk": "cloudinitdisk", "emptydisk": "emptydisk"},
		}},
		{name: "volumes without disks get virtio disks in volume order", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("b", "1Mi"), emptyDisk("a", "1Mi")}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("a")}
		}, want: &storage.VMPlan{
			Actions:     []storage.Action{pullGuest1, empty("b", 1<<20), empty("a", 1<<20), linkGuest1},
			Disks:       []qemu.Disk{booting(file("a", "/vols/u1/disks/a.qcow2", qemu.FormatQCOW2)), file("b", "/vols/u1/disks/b.qcow2", qemu.FormatQCOW2)},
			DiskVolumes: map[string]string{"a": "a", "b": "b"},
			Boot:        kernel,
		}},
		{name: "cdrom, lun and disk options", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"}), pvc("lun0", "blk", false), pvc("data", "data", false)}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{
				{Name: "ci", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{}}},
				{Name: "lun0", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{ReadOnly: true}}},
				{Name: "data", BootOrder: ptr.To[uint](1), Serial: "D1", Cache: vmletv1.CacheNone, IO: vmletv1.IONative,
					DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSCSI, ReadOnly: true}}},
			}
		}, want: &storage.VMPlan{
			Actions: []storage.Action{pullGuest1, iso("ci", "x"),
				{Kind: storage.ActHostPath, Volume: "lun0", Path: "/dev/vg0/blk", Block: true},
				claim("data", "/claims/data"), linkGuest1},
			Disks: []qemu.Disk{
				{ID: "ci", Path: "/vols/u1/disks/ci.iso", Format: qemu.FormatRaw, Bus: qemu.BusSATA, ReadOnly: true, CDROM: true},
				{ID: "lun0", Path: "/dev/vg0/blk", Format: qemu.FormatRaw, Bus: qemu.BusSCSI, ReadOnly: true},
				{ID: "data", Path: "/claims/data/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusSCSI, ReadOnly: true, Serial: "D1", BootIndex: 1,
					Cache: qemu.CacheNone, AIO: qemu.AIONative},
			},
			DiskVolumes: map[string]string{"ci": "ci", "lun0": "lun0", "data": "data"},
			Boot:        kernel,
		}},
		{name: "claims resolve in the VMI's namespace first", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{pvc("base", "base", false)}
		}, want: &storage.VMPlan{
			Actions:     []storage.Action{pullGuest1, claim("base", "/claims/base"), linkGuest1},
			Disks:       []qemu.Disk{booting(file("base", "/claims/base/disk.img", qemu.FormatRaw))},
			DiskVolumes: map[string]string{"base": "base"},
			Boot:        kernel,
		}},
		{name: "dataVolume, ephemeral and hostDisk", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{
				{Name: "dv", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "data"}}},
				{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
					PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base"}}}},
				{Name: "host-disk", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{
					Path: "/var/data/disk.img", Type: vmletv1.HostDiskExistsOrCreate, Capacity: resource.MustParse("1Gi")}}},
			}
		}, want: &storage.VMPlan{
			Actions: []storage.Action{pullGuest1, claim("dv", "/claims/data"),
				{Kind: storage.ActOverlay, Volume: "eph", Path: "/vols/u1/disks/eph.qcow2", Backing: "/claims/base/disk.img", BackingRoot: "/claims/base",
					BackingFormat: qemu.FormatRaw},
				{Kind: storage.ActHostPath, Volume: "host-disk", Path: "/var/data/disk.img", Root: "/var/data", Create: true, SizeBytes: 1 << 30},
				linkGuest1},
			Disks: []qemu.Disk{
				booting(file("dv", "/claims/data/disk.img", qemu.FormatRaw)),
				file("eph", "/vols/u1/disks/eph.qcow2", qemu.FormatQCOW2),
				file("host-disk", "/var/data/disk.img", qemu.FormatRaw),
			},
			DiskVolumes: map[string]string{"dv": "dv", "eph": "eph", "host-disk": "host-disk"},
			Boot:        kernel,
		}},
		{name: "cloud-init user data from a secret", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: "ud"}})}
		}, refs: Referenced{Secrets: map[string]map[string][]byte{"ud": {"userData": []byte("#cloud-config\n")}}},
			want: &storage.VMPlan{
				Actions:     []storage.Action{pullGuest1, iso("ci", "#cloud-config\n"), linkGuest1},
				Disks:       []qemu.Disk{booting(file("ci", "/vols/u1/disks/ci.iso", qemu.FormatRaw))},
				DiskVolumes: map[string]string{"ci": "ci"},
				Boot:        kernel,
			}},
		{name: "kernel image pull policy and :latest default", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.Image = "guest:latest"
			v.Spec.Volumes = []vmletv1.Volume{containerDisk("root", "guest:2")}
			v.Spec.Volumes[0].ContainerDisk.ImagePullPolicy = vmletv1.PullNever
		}, want: &storage.VMPlan{
			Actions: []storage.Action{
				{Kind: storage.ActPull, Volume: "root", Image: "guest:2", PullPolicy: oci.PullNever},
				{Kind: storage.ActPull, Image: "guest:latest", PullPolicy: oci.PullAlways},
				{Kind: storage.ActOverlay, Volume: "root", Path: "/vols/u1/disks/root.qcow2", Image: "guest:2"},
				{Kind: storage.ActLinkKernel, Path: "/vols/u1/boot/kernel", Image: "guest:latest", ImagePath: "/vmlinuz",
					Initrd: "/vols/u1/boot/initrd", InitrdImagePath: "/initramfs.gz"},
			},
			Disks:       []qemu.Disk{booting(file("root", "/vols/u1/disks/root.qcow2", qemu.FormatQCOW2))},
			DiskVolumes: map[string]string{"root": "root"},
			Boot:        kernel,
		}},
		{name: "image pull secrets of the kernel container and a containerDisk", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.Image = "reg.example/kernel:1"
			v.Spec.Domain.Firmware.KernelBoot.Container.ImagePullSecret = "kpull"
			v.Spec.Volumes = []vmletv1.Volume{containerDisk("root", "reg.example/disk:2")}
			v.Spec.Volumes[0].ContainerDisk.ImagePullSecret = "dpull"
		}, refs: Referenced{PullSecrets: map[string]oci.Credentials{
			"kpull": {"reg.example": {Username: "k", Password: "kp"}},
			"dpull": {"reg.example/disk": {Username: "d", Password: "dp"}}}},
			want: &storage.VMPlan{
				Actions: []storage.Action{
					{Kind: storage.ActPull, Volume: "root", Image: "reg.example/disk:2", PullPolicy: oci.PullIfNotPresent,
						Credentials: oci.Credentials{"reg.example/disk": {Username: "d", Password: "dp"}}},
					{Kind: storage.ActPull, Image: "reg.example/kernel:1", PullPolicy: oci.PullIfNotPresent,
						Credentials: oci.Credentials{"reg.example": {Username: "k", Password: "kp"}}},
					{Kind: storage.ActOverlay, Volume: "root", Path: "/vols/u1/disks/root.qcow2", Image: "reg.example/disk:2"},
					{Kind: storage.ActLinkKernel, Path: "/vols/u1/boot/kernel", Image: "reg.example/kernel:1", ImagePath: "/vmlinuz",
						Initrd: "/vols/u1/boot/initrd", InitrdImagePath: "/initramfs.gz"},
				},
				Disks:       []qemu.Disk{booting(file("root", "/vols/u1/disks/root.qcow2", qemu.FormatQCOW2))},
				DiskVolumes: map[string]string{"root": "root"},
				Boot:        kernel,
			}},
		{name: "hotpluggable volumes are not attached at boot", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{emptyDisk("scratch", "1Mi"), pvc("hot", "data", true)}
		}, want: &storage.VMPlan{
			Actions:     []storage.Action{pullGuest1, empty("scratch", 1<<20), linkGuest1},
			Disks:       []qemu.Disk{booting(file("scratch", "/vols/u1/disks/scratch.qcow2", qemu.FormatQCOW2))},
			DiskVolumes: map[string]string{"scratch": "scratch"},
			Boot:        kernel,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			d, err := Translate(vmi, storageTestEnv(), tt.refs)
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			tt.want.VMDir = testVolumeDir
			if diff := cmp.Diff(tt.want, d.Storage); diff != "" {
				t.Errorf("storage plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(d.Storage.Disks, d.Spec.Disks); diff != "" {
				t.Errorf("domain disks are not the plan's (-plan +domain):\n%s", diff)
			}
			if diff := cmp.Diff(d.Storage.Boot, d.Spec.Boot); diff != "" {
				t.Errorf("domain kernel is not the plan's (-plan +domain):\n%s", diff)
			}
		})
	}
}

// hotView is a HotplugVolume with its error as the tests compare it.
type hotView struct {
	Name string
	Plan *storage.VMPlan
	Err  *errView
}

// TestTranslateHotplugVolumes: a hotpluggable volume is planned alone, and one that cannot be
// attached is reported on its own without failing the VMI.
func TestTranslateHotplugVolumes(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Volumes = []vmletv1.Volume{pvc("hot", "data", true), pvc("gone", "nope", true), pvc("sata", "data", true),
		{Name: "nothing", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{Hotpluggable: true}}}}
	vmi.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "hot", Serial: "hot"}, virtioDisk("gone"),
		{Name: "sata", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: vmletv1.DiskBusSATA}}},
		{Name: "nothing", DedicatedIOThread: ptr.To(true)}}
	d, err := Translate(vmi, storageTestEnv(), Referenced{})
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	if len(d.Spec.Disks) != 0 {
		t.Errorf("hotpluggable volumes attached at boot: %v", d.Spec.Disks)
	}
	var got []hotView
	for _, h := range d.HotplugVolumes {
		got = append(got, hotView{Name: h.Name, Plan: h.Plan, Err: viewErr(t, h.Err)})
	}
	want := []hotView{
		{Name: "hot", Plan: &storage.VMPlan{VMDir: testVolumeDir,
			Actions:     []storage.Action{{Kind: storage.ActHostPath, Volume: "hot", Path: "/claims/data/disk.img", Root: "/claims/data"}},
			Disks:       []qemu.Disk{{ID: "hot", Path: "/claims/data/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusVirtio, Serial: "hot"}},
			DiskVolumes: map[string]string{"hot": "hot"}}},
		{Name: "gone", Err: &errView{"spec.volumes[1]", `volume gone: claim "nope": unknown claim`, storage.ReasonVolumeNotFound}},
		{Name: "sata", Err: &errView{"spec.domain.devices.disks[2]", `disk "sata": sata disks cannot be hotplugged (use virtio or scsi)`, "Unsupported"}},
		{Name: "nothing", Err: &errView{"spec.domain.devices.disks[3].dedicatedIOThread", `disk "nothing": a dedicated I/O thread is not supported yet`, "Unsupported"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hotplug volumes (-want +got):\n%s", diff)
	}
}
