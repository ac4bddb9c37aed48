package storage

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

const (
	vmDir   = "/run/vmlet/vms/uid-1"
	hdRoot  = "/var/lib/vmlet/hostdisks"
	image   = "registry.example/vm/fedora:40"
	kimage  = "registry.example/vm/kernel:v1"
	latestI = "registry.example/vm/cirros:latest"
)

func planOpts() Options {
	return Options{
		VMDir: vmDir, HostDiskRoot: hdRoot, InstanceID: "vm1.default", Hostname: "vm1",
		Claims: map[string]Claim{
			"data":  {Path: "/srv/claims/data"},
			"empty": {Path: "/srv/claims/empty", CapacityBytes: 1 << 30},
			"fast":  {Path: "/dev/vg0/fast", Mode: Block},
			"odd":   {Path: "/srv/claims/odd", Mode: "Object"},
		},
	}
}

func disk(id, path string, f qemu.DiskFormat, bus qemu.DiskBus) qemu.Disk {
	return qemu.Disk{ID: id, Path: path, Format: f, Bus: bus}
}

// TestPlan: every source, disk options and defaults, action order and pull deduplication.
func TestPlan(t *testing.T) {
	userData := &cloudinit.Source{UserData: "#cloud-config\n"}
	ci, err := cloudinit.NewConfig(cloudinit.NoCloud, *userData, cloudinit.MetaData{InstanceID: "vm1.default", Hostname: "vm1"})
	if err != nil {
		t.Fatal(err)
	}
	volumes := []Volume{
		{Name: "root", ContainerDisk: &ContainerDisk{Image: image}},
		{Name: "scratch", EmptyDisk: &EmptyDisk{CapacityBytes: 1 << 30}},
		{Name: "host", HostDisk: &HostDisk{Path: hdRoot + "/vm1/disk.img", Type: HostDiskOrCreate, CapacityBytes: 1 << 20}},
		{Name: "data", PersistentVolumeClaim: &ClaimRef{ClaimName: "data", ReadOnly: true}},
		{Name: "dv", DataVolume: &ClaimRef{ClaimName: "empty"}},
		{Name: "fast", PersistentVolumeClaim: &ClaimRef{ClaimName: "fast"}},
		{Name: "eph", Ephemeral: &ClaimRef{ClaimName: "data"}},
		{Name: "cloudinit", CloudInitNoCloud: userData},
		{Name: "second-root", ContainerDisk: &ContainerDisk{Image: image, Path: "/images/other.qcow2"}},
		{Name: "0-starts-with-a-digit-and-is-long", ContainerDisk: &ContainerDisk{Image: latestI, PullPolicy: oci.PullAlways}},
	}
	disks := []DiskRequest{
		{Name: "cloudinit", Serial: "CIDATA"},
		{Name: "root", BootOrder: 1, Cache: qemu.CacheNone, IO: qemu.AIONative},
		{Name: "data", Bus: qemu.BusSCSI},
		{Name: "fast", LUN: true},
		{Name: "eph", CDROM: true},
		{Name: "host", ReadOnly: true, Bus: qemu.BusSATA},
	}
	opts := planOpts()
	opts.KernelBoot = &KernelBoot{Image: kimage, KernelPath: "/boot/vmlinuz", InitrdPath: "/boot/initrd.img", KernelArgs: "console=ttyS0"}
	got, err := Plan(volumes, disks, opts)
	if err != nil {
		t.Fatal(err)
	}
	longID := DiskID("0-starts-with-a-digit-and-is-long")
	d := vmDir + "/disks/"
	wantActions := []Action{
		{Kind: ActPull, Volume: "root", Image: image, PullPolicy: oci.PullIfNotPresent},
		{Kind: ActPull, Volume: "0-starts-with-a-digit-and-is-long", Image: latestI, PullPolicy: oci.PullAlways},
		{Kind: ActPull, Image: kimage, PullPolicy: oci.PullIfNotPresent},
		{Kind: ActOverlay, Volume: "root", Path: d + "root.qcow2", Image: image},
		{Kind: ActEmpty, Volume: "scratch", Path: d + "scratch.qcow2", SizeBytes: 1 << 30},
		{Kind: ActHostPath, Volume: "host", Path: hdRoot + "/vm1/disk.img", Root: hdRoot, Create: true, SizeBytes: 1 << 20},
		{Kind: ActHostPath, Volume: "data", Path: "/srv/claims/data/disk.img", Root: "/srv/claims/data"},
		{Kind: ActHostPath, Volume: "dv", Path: "/srv/claims/empty/disk.img", Root: "/srv/claims/empty", Create: true, SizeBytes: 1 << 30},
		{Kind: ActHostPath, Volume: "fast", Path: "/dev/vg0/fast", Block: true},
		{Kind: ActOverlay, Volume: "eph", Path: d + "eph.qcow2", Backing: "/srv/claims/data/disk.img", BackingRoot: "/srv/claims/data", BackingFormat: qemu.FormatRaw},
		{Kind: ActISO, Volume: "cloudinit", Path: d + "cloudinit.iso", CloudInit: ci},
		{Kind: ActOverlay, Volume: "second-root", Path: d + "second-root.qcow2", Image: image, ImagePath: "/images/other.qcow2"},
		{Kind: ActOverlay, Volume: "0-starts-with-a-digit-and-is-long", Path: d + longID + ".qcow2", Image: latestI},
		{Kind: ActLinkKernel, Path: vmDir + "/boot/kernel", Image: kimage, ImagePath: "/boot/vmlinuz",
			Initrd: vmDir + "/boot/initrd", InitrdImagePath: "/boot/initrd.img"},
	}
	wantDisks := []qemu.Disk{
		{ID: "cloudinit", Path: d + "cloudinit.iso", Format: qemu.FormatRaw, Bus: qemu.BusVirtio, Serial: "CIDATA"},
		{ID: "root", Path: d + "root.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusVirtio, BootIndex: 1, Cache: qemu.CacheNone, AIO: qemu.AIONative},
		{ID: "data", Path: "/srv/claims/data/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusSCSI, ReadOnly: true},
		disk("fast", "/dev/vg0/fast", qemu.FormatRaw, qemu.BusSCSI),
		{ID: "eph", Path: d + "eph.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusSATA, CDROM: true, ReadOnly: true},
		{ID: "host", Path: hdRoot + "/vm1/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusSATA, ReadOnly: true},
		disk("scratch", d+"scratch.qcow2", qemu.FormatQCOW2, qemu.BusVirtio),
		disk("dv", "/srv/claims/empty/disk.img", qemu.FormatRaw, qemu.BusVirtio),
		disk("second-root", d+"second-root.qcow2", qemu.FormatQCOW2, qemu.BusVirtio),
		disk(longID, d+longID+".qcow2", qemu.FormatQCOW2, qemu.BusVirtio),
	}
	if !reflect.DeepEqual(got.Actions, wantActions) {
		t.Errorf("actions:\n%s\nwant:\n%s", dump(got.Actions), dump(wantActions))
	}
	if !reflect.DeepEqual(got.Disks, wantDisks) {
		t.Errorf("disks:\n%s\nwant:\n%s", dump(got.Disks), dump(wantDisks))
	}
	wantBoot := qemu.Boot{Kernel: vmDir + "/boot/kernel", Initrd: vmDir + "/boot/initrd", Cmdline: "console=ttyS0"}
	if got.Boot != wantBoot {
		t.Errorf("boot = %+v, want %+v", got.Boot, wantBoot)
	}
	if got.DiskVolumes[longID] != "0-starts-with-a-digit-and-is-long" || len(got.DiskVolumes) != len(wantDisks) {
		t.Errorf("disk volumes = %v", got.DiskVolumes)
	}
}

func dump[T any](xs []T) string {
	var b strings.Builder
	for _, x := range xs {
		fmt.Fprintf(&b, "  %+v\n", x)
	}
	return b.String()
}

// TestPlanErrors: what Plan refuses, with the sentinel each refusal wraps.
func TestPlanErrors(t *testing.T) {
	ud := &cloudinit.Source{UserData: "x"}
	cd := func(img string) *ContainerDisk { return &ContainerDisk{Image: img} }
	hd := func(p string) *HostDisk { return &HostDisk{Path: p, Type: HostDiskExisting} }
	tests := []struct {
		name    string
		volumes []Volume
		disks   []DiskRequest
		mutate  func(*Options)
		target  error
	}{
		{"no source", []Volume{{Name: "a"}}, nil, nil, ErrInvalidVolume},
		{"two sources", []Volume{{Name: "a", ContainerDisk: cd(image), EmptyDisk: &EmptyDisk{1}}}, nil, nil, ErrInvalidVolume},
		{"bad name", []Volume{{Name: "A_b", EmptyDisk: &EmptyDisk{1}}}, nil, nil, ErrInvalidVolume},
		{"name too long", []Volume{{Name: strings.Repeat("a", 64), EmptyDisk: &EmptyDisk{1}}}, nil, nil, ErrInvalidVolume},
		{"duplicate name", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}, {Name: "a", EmptyDisk: &EmptyDisk{1}}}, nil, nil, ErrInvalidVolume},
		{"bad image", []Volume{{Name: "a", ContainerDisk: cd("Bad Image")}}, nil, nil, oci.ErrInvalidReference},
		{"bad policy", []Volume{{Name: "a", ContainerDisk: &ContainerDisk{Image: image, PullPolicy: "Sometimes"}}}, nil, nil, ErrInvalidVolume},
		{"two policies", []Volume{{Name: "a", ContainerDisk: &ContainerDisk{Image: image, PullPolicy: oci.PullNever}},
			{Name: "b", ContainerDisk: &ContainerDisk{Image: image, PullPolicy: oci.PullAlways}}}, nil, nil, ErrInvalidVolume},
		{"relative image path", []Volume{{Name: "a", ContainerDisk: &ContainerDisk{Image: image, Path: "disk/x"}}}, nil, nil, ErrInvalidVolume},
		{"empty disk without size", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{}}}, nil, nil, ErrInvalidVolume},
		{"host disk outside root", []Volume{{Name: "a", HostDisk: hd("/etc/shadow")}}, nil, nil, ErrOutsideRoot},
		{"host disk with ..", []Volume{{Name: "a", HostDisk: hd(hdRoot + "/../../etc/shadow")}}, nil, nil, ErrOutsideRoot},
		{"host disk .. staying inside", []Volume{{Name: "a", HostDisk: hd(hdRoot + "/x/../y.img")}}, nil, nil, ErrOutsideRoot},
		{"host disk root prefix", []Volume{{Name: "a", HostDisk: hd(hdRoot + "-other/y.img")}}, nil, nil, ErrOutsideRoot},
		{"host disk is the root", []Volume{{Name: "a", HostDisk: hd(hdRoot)}}, nil, nil, ErrOutsideRoot},
		{"host disk relative", []Volume{{Name: "a", HostDisk: hd("disk.img")}}, nil, nil, ErrOutsideRoot},
		{"host disk no root", []Volume{{Name: "a", HostDisk: hd(hdRoot + "/y.img")}}, nil, func(o *Options) { o.HostDiskRoot = "" }, ErrOutsideRoot},
		{"host disk bad type", []Volume{{Name: "a", HostDisk: &HostDisk{Path: hdRoot + "/y.img", Type: "Directory"}}}, nil, nil, ErrInvalidVolume},
		{"DiskOrCreate without size", []Volume{{Name: "a", HostDisk: &HostDisk{Path: hdRoot + "/y.img", Type: HostDiskOrCreate}}}, nil, nil, ErrInvalidVolume},
		{"unknown claim", []Volume{{Name: "a", PersistentVolumeClaim: &ClaimRef{ClaimName: "nope"}}}, nil, nil, ErrUnknownClaim},
		{"claim mode", []Volume{{Name: "a", PersistentVolumeClaim: &ClaimRef{ClaimName: "odd"}}}, nil, nil, ErrUnsupportedMode},
		{"two cloud-inits", []Volume{{Name: "a", CloudInitNoCloud: ud}, {Name: "b", CloudInitConfigDrive: ud}}, nil, nil, ErrInvalidVolume},
		{"bad cloud-init", []Volume{{Name: "a", CloudInitNoCloud: &cloudinit.Source{}}}, nil, nil, cloudinit.ErrInvalid},
		{"cloud-init without instance id", []Volume{{Name: "a", CloudInitNoCloud: ud}}, nil, func(o *Options) { o.InstanceID = "" }, cloudinit.ErrInvalid},
		{"disk without volume", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "b"}}, nil, ErrUnknownVolume},
		{"two disks one volume", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a"}, {Name: "a"}}, nil, ErrInvalidDisk},
		{"cdrom and lun", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", CDROM: true, LUN: true}}, nil, ErrInvalidDisk},
		{"lun on virtio", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", LUN: true, Bus: qemu.BusVirtio}}, nil, ErrInvalidDisk},
		{"virtio cdrom", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", CDROM: true, Bus: qemu.BusVirtio}}, nil, qemu.ErrInvalidSpec},
		{"usb bus", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", Bus: "usb"}}, nil, qemu.ErrInvalidSpec},
		{"bad serial", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", Serial: "a b,c=d"}}, nil, qemu.ErrInvalidSpec},
		{"negative boot order", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", BootOrder: -1}}, nil, ErrInvalidDisk},
		{"same boot order", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}, {Name: "b", EmptyDisk: &EmptyDisk{1}}},
			[]DiskRequest{{Name: "a", BootOrder: 1}, {Name: "b", BootOrder: 1}}, nil, qemu.ErrInvalidSpec},
		{"native aio without direct cache", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, []DiskRequest{{Name: "a", IO: qemu.AIONative}}, nil, qemu.ErrInvalidSpec},
		{"vm dir relative", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, nil, func(o *Options) { o.VMDir = "vms/x" }, ErrInvalidVolume},
		{"vm dir with control char", []Volume{{Name: "a", EmptyDisk: &EmptyDisk{1}}}, nil, func(o *Options) { o.VMDir = "/vms/x\n" }, qemu.ErrInvalidSpec},
		{"kernel without path", nil, nil, func(o *Options) { o.KernelBoot = &KernelBoot{Image: kimage} }, ErrInvalidVolume},
		{"kernel args not printable", nil, nil, func(o *Options) {
			o.KernelBoot = &KernelBoot{Image: kimage, KernelPath: "/k", KernelArgs: "a\x00b"}
		}, qemu.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := planOpts()
			if tt.mutate != nil {
				tt.mutate(&opts)
			}
			p, err := Plan(tt.volumes, tt.disks, opts)
			if err == nil {
				t.Fatalf("planned: %+v", p)
			}
			if _, ok := errors.AsType[*VolumeError](err); !ok {
				t.Errorf("error %v is not a *VolumeError", err)
			}
			if !errors.Is(err, tt.target) {
				t.Errorf("error %v does not wrap %v", err, tt.target)
			}
		})
	}
}

func TestDiskID(t *testing.T) {
	long := strings.Repeat("a", 30)
	tests := map[string]string{
		"root":                        "root",
		"a-28-character-volume-name0": "a-28-character-volume-name0",
		"0data":                       "v0data-" + DiskID("0data")[len("v0data-"):],
		long:                          strings.Repeat("a", 19) + "-" + DiskID(long)[20:],
	}
	for name, want := range tests {
		got := DiskID(name)
		if got != want || !qemuIDRe.MatchString(got) {
			t.Errorf("DiskID(%q) = %q, want %q matching QEMU's id rules", name, got, want)
		}
	}
	// Distinct DNS labels that share a long prefix or differ only after char 19 stay distinct.
	seen := map[string]string{}
	for _, n := range []string{long, long + "b", strings.Repeat("a", 19) + "-x", "9" + long, "9", "a-", strings.Repeat("z", 63)} {
		id := DiskID(n)
		if !qemuIDRe.MatchString(id) {
			t.Errorf("DiskID(%q) = %q breaks QEMU's id rules", n, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("DiskID(%q) = DiskID(%q) = %q", n, other, id)
		}
		seen[id] = n
	}
}

// FuzzDiskID: any DNS label maps to a valid QEMU id.
func FuzzDiskID(f *testing.F) {
	for _, s := range []string{"a", "0", "a-b", strings.Repeat("x", 63), "9-9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if !dnsLabelRe.MatchString(name) {
			return
		}
		if id := DiskID(name); !qemuIDRe.MatchString(id) {
			t.Errorf("DiskID(%q) = %q", name, id)
		}
	})
}
