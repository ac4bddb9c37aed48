package translate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

func TestMigrationTarget(t *testing.T) {
	own := &qemu.Spec{
		Name: "vm", Machine: "q35", MemoryMiB: 256, CPU: qemu.CPU{Cores: 2},
		Disks: []qemu.Disk{{ID: "disk-root", Path: "/target/root.qcow2"}, {ID: "disk-data", Path: "/target/data.img", Bus: qemu.BusSCSI}},
		NICs:  []qemu.NIC{{ID: "net-default", TapName: "tap0"}},
	}
	layout := &vmletv1.MigrationDomainLayout{
		Machine: "pc-q35-7.2", CPUModel: "max", HotplugPorts: 3, SCSI: true,
		Devices: []vmletv1.MigrationDevicePort{
			{Kind: "disk", ID: "disk-root", Port: 2}, {Kind: "disk", ID: "disk-data", Port: 1}, {Kind: "nic", ID: "net-default", Port: 1},
		},
	}
	for _, tc := range []struct {
		name    string
		spec    *qemu.Spec
		layout  *vmletv1.MigrationDomainLayout
		want    *qemu.Spec
		wantErr string
	}{{
		name: "placed as the source", spec: own, layout: layout,
		want: &qemu.Spec{
			Name: "vm", Machine: "pc-q35-7.2", MemoryMiB: 256, CPU: qemu.CPU{Model: "max", Cores: 2},
			Disks:        []qemu.Disk{{ID: "disk-root", Path: "/target/root.qcow2", Port: 2}, {ID: "disk-data", Path: "/target/data.img", Bus: qemu.BusSCSI, Port: 1}},
			NICs:         []qemu.NIC{{ID: "net-default", TapName: "tap0", Port: 1}},
			HotplugPorts: 3, SCSI: true, Incoming: true,
		},
	}, {
		name: "the source's display", spec: withDisplay(own), layout: displayLayout(layout, ptr.To(true)),
		want: &qemu.Spec{
			Name: "vm", Machine: "pc-q35-7.2", MemoryMiB: 256, CPU: qemu.CPU{Model: "max", Cores: 2},
			Disks:        []qemu.Disk{{ID: "disk-root", Path: "/target/root.qcow2", Port: 2}, {ID: "disk-data", Path: "/target/data.img", Bus: qemu.BusSCSI, Port: 1}},
			NICs:         []qemu.NIC{{ID: "net-default", TapName: "tap0", Port: 1}},
			Graphics:     &qemu.Graphics{Socket: "/run/t/vnc.sock"},
			HotplugPorts: 3, SCSI: true, Incoming: true,
		},
	}, {
		// A source started by an agent from before displays (no Display in its layout) or by a
		// launcher that predates them (false): the target has none either.
		name: "a source without a display", spec: withDisplay(own), layout: displayLayout(layout, nil),
		want: &qemu.Spec{
			Name: "vm", Machine: "pc-q35-7.2", MemoryMiB: 256, CPU: qemu.CPU{Model: "max", Cores: 2},
			Disks:        []qemu.Disk{{ID: "disk-root", Path: "/target/root.qcow2", Port: 2}, {ID: "disk-data", Path: "/target/data.img", Bus: qemu.BusSCSI, Port: 1}},
			NICs:         []qemu.NIC{{ID: "net-default", TapName: "tap0", Port: 1}},
			HotplugPorts: 3, SCSI: true, Incoming: true,
		},
	}, {
		name: "a display only the source has", spec: own, layout: displayLayout(layout, ptr.To(true)),
		wantErr: "the source has a display",
	}, {
		name: "with the source's plugged vCPUs and memory", spec: withHotplug(own), layout: withPlugged(layout, 2, 256),
		want: &qemu.Spec{
			Name: "vm", Machine: "pc-q35-7.2", MemoryMiB: 256, CPU: qemu.CPU{Model: "max", Cores: 2, Sockets: 1, MaxSockets: 4, PluggedSockets: 2},
			MemoryHotplug: &qemu.MemoryHotplug{MaxMiB: 1024, RequestedMiB: 256, BlockMiB: 2},
			Disks:         []qemu.Disk{{ID: "disk-root", Path: "/target/root.qcow2", Port: 2}, {ID: "disk-data", Path: "/target/data.img", Bus: qemu.BusSCSI, Port: 1}},
			NICs:          []qemu.NIC{{ID: "net-default", TapName: "tap0", Port: 1}},
			HotplugPorts:  3, SCSI: true, Incoming: true,
		},
	}, {
		name: "a device only the source has", spec: &qemu.Spec{Name: "vm", Disks: own.Disks}, layout: layout,
		wantErr: "the source has [nic/net-default]",
	}, {
		name: "a device only the target has",
		spec: &qemu.Spec{Name: "vm", Disks: append([]qemu.Disk{{ID: "disk-new"}}, own.Disks...), NICs: own.NICs}, layout: layout,
		wantErr: "disk disk-new is not on the source",
	}, {
		name: "no layout", spec: own, wantErr: "no source layout",
	}, {
		name: "no machine", spec: own, layout: &vmletv1.MigrationDomainLayout{Devices: layout.Devices},
		wantErr: "names no machine type",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MigrationTarget(tc.spec, tc.layout)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("spec (-want +got):\n%s", d)
			}
			if own.Disks[0].Port != 0 || own.NICs[0].Port != 0 || own.Incoming {
				t.Fatal("the input spec was changed")
			}
		})
	}
}

func withHotplug(s *qemu.Spec) *qemu.Spec {
	c := *s
	c.CPU.Sockets, c.CPU.MaxSockets = 1, 4
	c.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: 1024, BlockMiB: 2}
	return &c
}

func withPlugged(l *vmletv1.MigrationDomainLayout, sockets, memMiB int32) *vmletv1.MigrationDomainLayout {
	c := *l
	c.PluggedSockets, c.MemoryRequestedMiB = sockets, memMiB
	return &c
}

func TestCopiedDisks(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "img"}}},
		{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("64Mi")}}},
		{Name: "ci", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{}}},
		{Name: "iso", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "iso"}}},
	}
	disks := []qemu.Disk{{ID: "root"}, {ID: "scratch"}, {ID: "ci", ReadOnly: true}, {ID: "iso", ReadOnly: true}, {ID: "unknown"}}
	vols := map[string]string{"root": "root", "scratch": "scratch", "ci": "ci", "iso": "iso"}
	want := []CopiedDisk{{ID: "root", Shallow: true}, {ID: "scratch", Bytes: 64 << 20}}
	if d := cmp.Diff(want, CopiedDisks(vmi, disks, vols)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func withDisplay(s *qemu.Spec) *qemu.Spec {
	c := *s
	c.Graphics = &qemu.Graphics{Socket: "/run/t/vnc.sock"}
	return &c
}

func displayLayout(l *vmletv1.MigrationDomainLayout, display *bool) *vmletv1.MigrationDomainLayout {
	c := *l
	c.Display = display
	return &c
}

func TestCheckTargetCPU(t *testing.T) {
	tcg10 := QEMUBuild{Accel: "tcg", Version: "10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"}
	tcg10other := QEMUBuild{Accel: "tcg", Version: "10.0.2"}
	tcg72 := QEMUBuild{Accel: "tcg", Version: "7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)"}
	kvm10 := QEMUBuild{Accel: "kvm", Version: tcg10.Version}
	for _, c := range []struct {
		name     string
		model    string
		src, dst QEMUBuild
		refused  string // a word of the refusal; "" = accepted
	}{
		{"same build", "max", tcg10, tcg10, ""},
		{"same release, other package", "max", tcg10, tcg10other, ""},
		{"max across releases", "max", tcg10, tcg72, "7.2.22"},
		{"host across releases", "host", kvm10, QEMUBuild{Accel: "kvm", Version: "9.2.0"}, "9.2.0"},
		{"named model across releases", "Haswell-noTSX", kvm10, QEMUBuild{Accel: "kvm", Version: "9.2.0"}, ""},
		{"accelerator differs", "Haswell-noTSX", tcg10, kvm10, "kvm"},
		{"max, accelerator differs", "max", kvm10, tcg10, "tcg"},
		{"source unknown", "max", QEMUBuild{}, tcg72, ""},
		{"target unknown", "max", tcg10, QEMUBuild{}, ""},
	} {
		err := CheckTargetCPU(c.model, c.src, c.dst)
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: got %v, want a refusal naming %q", c.name, err, c.refused)
		}
	}
}
