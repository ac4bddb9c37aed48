package translate

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

// cmpOpts compares the plain values Translate returns; netip.Prefix has unexported fields.
var cmpOpts = cmp.Options{cmpopts.EquateComparable(netip.Prefix{})}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

const (
	testUID       = "6f1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a11"
	testVolumeDir = "/vols/u1"
)

// baseVMI is a kernel-boot VMI with 128 MiB and KubeVirt's default interface.
func baseVMI() *vmletv1.VirtualMachineInstance {
	return &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: testUID},
		Spec: vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{
			Memory: &vmletv1.Memory{Guest: qty("128Mi")},
			Firmware: &vmletv1.Firmware{KernelBoot: &vmletv1.KernelBoot{
				KernelArgs: "console=ttyS0",
				Container:  &vmletv1.KernelBootContainer{Image: "guest:1", KernelPath: "/vmlinuz", InitrdPath: "/initramfs.gz"},
			}},
		}},
	}
}

func testEnv() NodeEnv {
	return NodeEnv{RunDir: "/run/vmlet/x", VolumeDir: testVolumeDir, TCGCacheMiB: 32}
}

// storageTestEnv provides claims "data" (any namespace), "default/base", "other/base", the
// block claim "blk", a host disk root and an image mirror.
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

// Volume sources and disk targets for the tables.
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

func masqIface(name string) vmletv1.Interface {
	return vmletv1.Interface{Name: name, InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}
}

func podNet(name string) vmletv1.Network {
	return vmletv1.Network{Name: name, NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}
}

func multusNet(name, nad string) vmletv1.Network {
	return vmletv1.Network{Name: name, NetworkSource: vmletv1.NetworkSource{Multus: &vmletv1.MultusNetwork{NetworkName: nad}}}
}

// defaultNIC is the NIC of KubeVirt's default interface (bridge on the pod network).
func defaultNIC() qemu.NIC {
	return qemu.NIC{ID: "net-default", MAC: network.GenerateMAC(testUID, "default").String(), TapName: "tap0", Queues: 1}
}

// defaultNetwork is the network spec of KubeVirt's default interface for a VMI named host.
func defaultNetwork(host string) *network.Spec {
	return &network.Spec{UID: testUID, Hostname: host, VCPUs: 1,
		Interfaces: []network.Interface{{Name: "default", Binding: network.BindingBridge}},
		Networks:   []network.Network{{Name: "default", Pod: true}}}
}

// wantSpec is the domain of baseVMI on testEnv.
func wantSpec() *qemu.Spec {
	return &qemu.Spec{
		Name: "default_demo", UUID: testUID, TCGCacheMiB: 32, MemoryMiB: 128,
		Boot:     qemu.Boot{Kernel: "/vols/u1/boot/kernel", Initrd: "/vols/u1/boot/initrd", Cmdline: "console=ttyS0"},
		NICs:     []qemu.NIC{defaultNIC()},
		Serial:   &qemu.Serial{Socket: "/run/vmlet/x/serial.sock", LogFile: "/run/vmlet/x/serial.log"},
		Agent:    &qemu.Agent{Socket: "/run/vmlet/x/qga.sock"},
		Balloon:  &qemu.Balloon{StatsPeriodSeconds: 10, FreePageReporting: true},
		Graphics: &qemu.Graphics{Socket: "/run/vmlet/x/vnc.sock"},
		SCSI:     true, HotplugPorts: 4,
	}
}

// Storage actions of baseVMI's kernel boot.
var (
	pullGuest1 = storage.Action{Kind: storage.ActPull, Image: "guest:1", PullPolicy: oci.PullIfNotPresent}
	linkGuest1 = storage.Action{Kind: storage.ActLinkKernel, Path: "/vols/u1/boot/kernel", Image: "guest:1", ImagePath: "/vmlinuz",
		Initrd: "/vols/u1/boot/initrd", InitrdImagePath: "/initramfs.gz"}
)

// errView is what the tests compare of a translation error: the *SpecError's field and
// reason, and what the reconciler's VMI reason will be (controllers' specReason): Unsupported
// for ErrUnsupported, storage.Reason for a *storage.VolumeError, else InvalidSpec.
type errView struct {
	Field, Reason, Kind string
}

func viewErr(t *testing.T, err error) *errView {
	t.Helper()
	if err == nil {
		return nil
	}
	se, ok := errors.AsType[*SpecError](err)
	if !ok {
		t.Fatalf("err = %v (%T), want a *SpecError", err, err)
	}
	v := &errView{Field: se.Field, Reason: se.Reason, Kind: "InvalidSpec"}
	if _, ok := errors.AsType[*storage.VolumeError](err); ok {
		v.Kind = storage.Reason(err)
	}
	if errors.Is(err, ErrUnsupported) {
		v.Kind = "Unsupported"
	}
	return v
}

// TestTranslate compares whole Desired values.
func TestTranslate(t *testing.T) {
	hostNIC := network.SecondaryInterfaceName("node")
	tests := []struct {
		name string
		vmi  func() *vmletv1.VirtualMachineInstance
		env  NodeEnv
		refs Referenced
		want *Desired
	}{
		{name: "minimal VMI: no resources, devices, cpu or firmware",
			vmi: func() *vmletv1.VirtualMachineInstance {
				return &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "minimal", UID: testUID}}
			},
			env: NodeEnv{RunDir: "/run/vmlet/m", VolumeDir: "/vols/m"},
			want: &Desired{
				Spec: &qemu.Spec{Name: "ns_minimal", UUID: testUID, MemoryMiB: 128,
					NICs:     []qemu.NIC{defaultNIC()},
					Serial:   &qemu.Serial{Socket: "/run/vmlet/m/serial.sock", LogFile: "/run/vmlet/m/serial.log"},
					Agent:    &qemu.Agent{Socket: "/run/vmlet/m/qga.sock"},
					Balloon:  &qemu.Balloon{StatsPeriodSeconds: 10, FreePageReporting: true},
					Graphics: &qemu.Graphics{Socket: "/run/vmlet/m/vnc.sock"},
					SCSI:     true, HotplugPorts: 4},
				Storage: &storage.VMPlan{VMDir: "/vols/m", DiskVolumes: map[string]string{}},
				Network: defaultNetwork("minimal"),
			}},
		{name: "kernel boot with KubeVirt's default interface", vmi: baseVMI, env: testEnv(),
			want: &Desired{
				Spec: wantSpec(),
				Storage: &storage.VMPlan{VMDir: testVolumeDir, DiskVolumes: map[string]string{}, Actions: []storage.Action{pullGuest1, linkGuest1},
					Boot: qemu.Boot{Kernel: "/vols/u1/boot/kernel", Initrd: "/vols/u1/boot/initrd", Cmdline: "console=ttyS0"}},
				Network: defaultNetwork("demo"),
			}},
		{name: "every part: boot disks, a hotplug volume, a secondary interface, an absent one",
			vmi: func() *vmletv1.VirtualMachineInstance {
				v := baseVMI()
				v.Spec.Domain.Firmware = nil
				v.Spec.Volumes = []vmletv1.Volume{containerDisk("root", "registry:5000/kubevirt/cirros:devel"),
					noCloud("ci", vmletv1.CloudInitData{UserDataSecretRef: &vmletv1.LocalObjectReference{Name: "ud"}}),
					pvc("hot", "data", true)}
				v.Spec.Domain.Devices.Disks = []vmletv1.Disk{virtioDisk("root"), virtioDisk("ci"), virtioDisk("hot")}
				gone := masqIface("gone")
				gone.State = vmletv1.InterfaceStateAbsent
				v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{masqIface("default"), {Name: "node"}, gone}
				v.Spec.Networks = []vmletv1.Network{podNet("default"), multusNet("node", "vmlet-node"), multusNet("gone", "vmlet-node")}
				return v
			},
			env:  storageTestEnv(),
			refs: Referenced{Secrets: map[string]map[string][]byte{"ud": {"userdata": []byte("#cloud-config\n")}}},
			want: &Desired{
				Spec: func() *qemu.Spec {
					s := wantSpec()
					s.Boot = qemu.Boot{}
					s.Disks = []qemu.Disk{
						{ID: "root", Path: "/vols/u1/disks/root.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusVirtio, BootIndex: 1},
						{ID: "ci", Path: "/vols/u1/disks/ci.iso", Format: qemu.FormatRaw, Bus: qemu.BusVirtio},
					}
					return s
				}(),
				Storage: &storage.VMPlan{VMDir: testVolumeDir,
					Actions: []storage.Action{
						{Kind: storage.ActPull, Volume: "root", Image: "127.0.0.1:5000/kubevirt/cirros:devel", PullPolicy: oci.PullIfNotPresent},
						{Kind: storage.ActOverlay, Volume: "root", Path: "/vols/u1/disks/root.qcow2", Image: "127.0.0.1:5000/kubevirt/cirros:devel"},
						{Kind: storage.ActISO, Volume: "ci", Path: "/vols/u1/disks/ci.iso", CloudInit: &cloudinit.Config{Kind: cloudinit.NoCloud,
							UserData: []byte("#cloud-config\n"), Meta: cloudinit.MetaData{InstanceID: "demo.default", Hostname: "demo"}}},
					},
					Disks: []qemu.Disk{
						{ID: "root", Path: "/vols/u1/disks/root.qcow2", Format: qemu.FormatQCOW2, Bus: qemu.BusVirtio, BootIndex: 1},
						{ID: "ci", Path: "/vols/u1/disks/ci.iso", Format: qemu.FormatRaw, Bus: qemu.BusVirtio},
					},
					DiskVolumes: map[string]string{"root": "root", "ci": "ci"}},
				Network: &network.Spec{UID: testUID, Hostname: "demo", VCPUs: 1,
					Interfaces: []network.Interface{{Name: "default", Binding: network.BindingMasquerade}, {Name: "node", Binding: network.BindingBridge}},
					Networks:   []network.Network{{Name: "default", Pod: true}, {Name: "node", Attachment: "vmlet-node"}}},
				HotplugVolumes: []HotplugVolume{{Name: "hot", Plan: &storage.VMPlan{VMDir: testVolumeDir,
					Actions:     []storage.Action{{Kind: storage.ActHostPath, Volume: "hot", Path: "/claims/data/disk.img", Root: "/claims/data"}},
					Disks:       []qemu.Disk{{ID: "hot", Path: "/claims/data/disk.img", Format: qemu.FormatRaw, Bus: qemu.BusVirtio}},
					DiskVolumes: map[string]string{"hot": "hot"}}}},
				HotplugNICs: []HotNIC{{Name: "node", PodInterface: hostNIC, NIC: qemu.NIC{ID: "net-node",
					MAC: network.GenerateMAC(testUID, "node").String(), TapName: network.TapName(hostNIC), Queues: 1}}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Translate(tt.vmi(), tt.env, tt.refs)
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("Translate (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTranslateSpec compares the whole domain spec of baseVMI with one change.
func TestTranslateSpec(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*vmletv1.VirtualMachineInstance)
		want   func(*qemu.Spec) // applied to wantSpec(); nil: wantSpec() as is
	}{
		{name: "kernel boot defaults"},
		{name: "paused is not part of the domain", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Paused = true }},
		{name: "memory from requests", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = nil
			v.Spec.Domain.Resources.Requests = vmletv1.ResourceList{vmletv1.ResourceMemory: *qty("1Gi")}
		}, want: func(s *qemu.Spec) { s.MemoryMiB = 1024 }},
		{name: "memory from limits without requests", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = nil
			v.Spec.Domain.Resources.Limits = vmletv1.ResourceList{vmletv1.ResourceMemory: *qty("512Mi")}
		}, want: func(s *qemu.Spec) { s.MemoryMiB = 512 }},
		{name: "guest memory wins over requests", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Resources.Requests = vmletv1.ResourceList{vmletv1.ResourceMemory: *qty("1Gi")}
		}},
		{name: "memory in decimal units rounds up", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = qty("1024M") },
			want: func(s *qemu.Spec) { s.MemoryMiB = 977 }},
		{name: "cpu topology and model", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 1, Cores: 2, Threads: 1, Model: "qemu64"}
		}, want: func(s *qemu.Spec) { s.CPU = qemu.CPU{Model: "qemu64", Sockets: 1, Cores: 2, Threads: 1} }},
		{name: "machine type", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Machine = &vmletv1.Machine{Type: "pc-q35-7.2"} },
			want: func(s *qemu.Spec) { s.Machine = "pc-q35-7.2" }},
		{name: "firmware uuid", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.UUID = "0d1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a99"
		}, want: func(s *qemu.Spec) { s.UUID = "0d1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a99" }},
		{name: "rng", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Devices.Rng = &vmletv1.Rng{} },
			want: func(s *qemu.Spec) { s.RNG = true }},
		{name: "no serial console", mutate: func(v *vmletv1.VirtualMachineInstance) {
			f := false
			v.Spec.Domain.Devices.AutoattachSerialConsole = &f
		}, want: func(s *qemu.Spec) { s.Serial = nil }},
		{name: "no memory balloon", mutate: func(v *vmletv1.VirtualMachineInstance) {
			f := false
			v.Spec.Domain.Devices.AutoattachMemBalloon = &f
		}, want: func(s *qemu.Spec) { s.Balloon = nil }},
		{name: "memory balloon asked for explicitly", mutate: func(v *vmletv1.VirtualMachineInstance) {
			yes := true
			v.Spec.Domain.Devices.AutoattachMemBalloon = &yes
		}},
		{name: "no graphics device", mutate: func(v *vmletv1.VirtualMachineInstance) {
			f := false
			v.Spec.Domain.Devices.AutoattachGraphicsDevice = &f
		}, want: func(s *qemu.Spec) { s.Graphics = nil }},
		{name: "graphics device asked for explicitly", mutate: func(v *vmletv1.VirtualMachineInstance) {
			yes := true
			v.Spec.Domain.Devices.AutoattachGraphicsDevice = &yes
		}},
		{name: "free page reporting disabled by KubeVirt's annotation", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Annotations = map[string]string{"kubevirt.io/free-page-reporting-disabled": "true"}
		}, want: func(s *qemu.Spec) { s.Balloon.FreePageReporting = false }},
		{name: "long names are cut to 63 characters", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Namespace, v.Name = "a-namespace-with-a-long-name", "and-a-vmi-with-an-even-longer-name-than-that"
		}, want: func(s *qemu.Spec) {
			s.Name = "a-namespace-with-a-long-name_and-a-vmi-with-an-even-longer-name"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			want := wantSpec()
			if tt.want != nil {
				tt.want(want)
			}
			got, err := Translate(vmi, testEnv(), Referenced{})
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if diff := cmp.Diff(want, got.Spec, cmpOpts); diff != "" {
				t.Errorf("domain spec (-want +got):\n%s", diff)
			}
		})
	}
}
