package translate

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Disk targets for the boot order table.
func diskOn(name string, bus vmletv1.DiskBus) vmletv1.Disk {
	return vmletv1.Disk{Name: name, DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: bus}}}
}

func cdromOn(name string, bus vmletv1.DiskBus) vmletv1.Disk {
	return vmletv1.Disk{Name: name, DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: bus}}}
}

func booting(d vmletv1.Disk, order uint) vmletv1.Disk {
	d.BootOrder = &order
	return d
}

// renderBoot is every device of the domain with its boot index (0: none), disks then NICs:
// the one thing this table is about (TestTranslateVolumes compares whole disks).
func renderBoot(got *Desired) []string {
	var out []string
	for _, d := range got.Spec.Disks {
		out = append(out, fmt.Sprintf("%s=%d", d.ID, d.BootIndex))
	}
	for _, n := range got.Spec.NICs {
		out = append(out, fmt.Sprintf("%s=%d", n.ID, n.BootIndex))
	}
	return out
}

// TestTranslateBootOrder: the boot indexes KubeVirt's domains get from libvirt (bootorder.go).
// With no bootOrder anywhere the first disk or lun of libvirt's bus-grouped disk list gets 1 and
// nothing else an index; with any bootOrder, exactly the devices that set one get it.
func TestTranslateBootOrder(t *testing.T) {
	// The volumes of the VMI: a bootable containerDisk, an emptyDisk, a NoCloud disk.
	vols := []vmletv1.Volume{containerDisk("boot", "registry:5000/kubevirt/cirros:devel"), emptyDisk("scratch", "64Mi"),
		noCloud("ci", vmletv1.CloudInitData{UserData: "#cloud-config\n"})}
	const (
		virtio = vmletv1.DiskBusVirtio
		sata   = vmletv1.DiskBusSATA
		scsi   = vmletv1.DiskBusSCSI
	)
	tests := []struct {
		name   string
		vols   []vmletv1.Volume // nil: vols
		disks  []vmletv1.Disk
		ifaces []vmletv1.Interface // nil: KubeVirt's default interface (no boot order)
		want   []string
	}{
		{name: "issue #13: virtio boot disk first, sata emptyDisk and NoCloud cdrom after",
			disks: []vmletv1.Disk{diskOn("boot", virtio), diskOn("scratch", sata), cdromOn("ci", sata)},
			want:  []string{"boot=1", "scratch=0", "ci=0", "net-default=0"}},
		{name: "sata boot disk first",
			disks: []vmletv1.Disk{diskOn("boot", sata), diskOn("scratch", sata), cdromOn("ci", sata)},
			want:  []string{"boot=1", "scratch=0", "ci=0", "net-default=0"}},
		{name: "scsi boot disk first",
			disks: []vmletv1.Disk{diskOn("boot", scsi), diskOn("scratch", sata), cdromOn("ci", sata)},
			want:  []string{"boot=1", "scratch=0", "ci=0", "net-default=0"}},
		{name: "scsi boot disk first, virtio disks after",
			disks: []vmletv1.Disk{diskOn("boot", scsi), diskOn("scratch", virtio), diskOn("ci", virtio)},
			want:  []string{"boot=1", "scratch=0", "ci=0", "net-default=0"}},
		{name: "a cdrom listed first is skipped: hd means a disk or a lun",
			disks: []vmletv1.Disk{cdromOn("ci", sata), diskOn("boot", virtio), diskOn("scratch", virtio)},
			want:  []string{"ci=0", "boot=1", "scratch=0", "net-default=0"}},
		{name: "a sata cdrom listed first pulls the sata disks ahead of virtio (libvirt groups disks by bus)",
			disks: []vmletv1.Disk{cdromOn("ci", sata), diskOn("boot", virtio), diskOn("scratch", sata)},
			want:  []string{"ci=0", "boot=0", "scratch=1", "net-default=0"}},
		{name: "only cdroms: nothing to boot",
			vols:  []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"})},
			disks: []vmletv1.Disk{cdromOn("ci", sata)},
			want:  []string{"ci=0", "net-default=0"}},
		{name: "a lun boots like a disk",
			vols: []vmletv1.Volume{noCloud("ci", vmletv1.CloudInitData{UserData: "x"}), pvc("lun0", "blk", false), emptyDisk("scratch", "1Mi")},
			disks: []vmletv1.Disk{cdromOn("ci", scsi),
				{Name: "lun0", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{Bus: scsi}}}, diskOn("scratch", scsi)},
			want: []string{"ci=0", "lun0=1", "scratch=0", "net-default=0"}},
		{name: "volumes without a disk are virtio disks after the listed ones",
			disks: []vmletv1.Disk{cdromOn("ci", sata)},
			want:  []string{"ci=0", "boot=1", "scratch=0", "net-default=0"}},
		{name: "hotpluggable volumes are not at boot: the first disk attached at boot gets 1",
			vols:  []vmletv1.Volume{pvc("hot", "data", true), emptyDisk("scratch", "1Mi")},
			disks: []vmletv1.Disk{diskOn("hot", scsi), diskOn("scratch", virtio)},
			want:  []string{"scratch=1", "net-default=0"}},
		{name: "bootOrder on a disk listed last: only it gets an index",
			disks: []vmletv1.Disk{diskOn("scratch", sata), cdromOn("ci", sata), booting(diskOn("boot", virtio), 1)},
			want:  []string{"scratch=0", "ci=0", "boot=1", "net-default=0"}},
		{name: "bootOrder values as written, cdrom included",
			disks: []vmletv1.Disk{booting(diskOn("scratch", sata), 3), booting(cdromOn("ci", sata), 7), booting(diskOn("boot", scsi), 2)},
			want:  []string{"scratch=3", "ci=7", "boot=2", "net-default=0"}},
		{name: "interface bootOrder 1, disk bootOrder 2",
			disks:  []vmletv1.Disk{diskOn("scratch", sata), cdromOn("ci", sata), booting(diskOn("boot", virtio), 2)},
			ifaces: []vmletv1.Interface{{Name: "default", BootOrder: ptr.To[uint](1), InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}},
			want:   []string{"scratch=0", "ci=0", "boot=2", "net-default=1"}},
		{name: "a bootOrder on an interface only: no disk gets an index",
			disks:  []vmletv1.Disk{diskOn("boot", virtio), diskOn("scratch", sata), cdromOn("ci", sata)},
			ifaces: []vmletv1.Interface{{Name: "default", BootOrder: ptr.To[uint](4), InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}},
			want:   []string{"boot=0", "scratch=0", "ci=0", "net-default=4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Domain.Firmware = nil // BIOS boot
			vmi.Spec.Volumes = tt.vols
			if tt.vols == nil {
				vmi.Spec.Volumes = vols
			}
			vmi.Spec.Domain.Devices.Disks = tt.disks
			if tt.ifaces != nil {
				vmi.Spec.Domain.Devices.Interfaces = tt.ifaces
				vmi.Spec.Networks = []vmletv1.Network{podNet("default")}
			}
			d, err := Translate(vmi, storageTestEnv(), Referenced{})
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if diff := cmp.Diff(tt.want, renderBoot(d)); diff != "" {
				t.Errorf("boot indexes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDefaultBootDiskKernelBoot: a kernelBoot VMI's first disk gets bootindex 1 as in KubeVirt
// (harmless: QEMU's kernel loader ROM has bootindex 0 and boots first).
func TestDefaultBootDiskKernelBoot(t *testing.T) {
	vmi := baseVMI()
	vmi.Spec.Volumes = []vmletv1.Volume{emptyDisk("scratch", "1Mi")}
	d, err := Translate(vmi, storageTestEnv(), Referenced{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"scratch=1", "net-default=0"}, renderBoot(d)); diff != "" {
		t.Errorf("boot indexes (-want +got):\n%s", diff)
	}
}
