package v1alpha1_test

import (
	"reflect"
	"testing"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func TestEffectiveDisks(t *testing.T) {
	uint1 := uint(1)
	tests := []struct {
		name  string
		disks []vmletv1.Disk
		vols  []string
		want  []vmletv1.Disk
	}{{
		name: "volume without disk gets a virtio disk",
		vols: []string{"root"},
		want: []vmletv1.Disk{{Name: "root", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: "virtio"}}}},
	}, {
		name:  "disk without target becomes a virtio disk",
		disks: []vmletv1.Disk{{Name: "root", BootOrder: &uint1}},
		vols:  []string{"root"},
		want:  []vmletv1.Disk{{Name: "root", BootOrder: &uint1, DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: "virtio"}}}},
	}, {
		name: "buses default per device type and explicit buses stay",
		disks: []vmletv1.Disk{
			{Name: "cd", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{}}},
			{Name: "lun", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{}}},
			{Name: "sata", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: "sata"}}},
		},
		vols: []string{"cd", "lun", "sata", "extra"},
		want: []vmletv1.Disk{
			{Name: "cd", DiskDevice: vmletv1.DiskDevice{CDRom: &vmletv1.CDRomTarget{Bus: "sata"}}},
			{Name: "lun", DiskDevice: vmletv1.DiskDevice{LUN: &vmletv1.LunTarget{Bus: "scsi"}}},
			{Name: "sata", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: "sata"}}},
			{Name: "extra", DiskDevice: vmletv1.DiskDevice{Disk: &vmletv1.DiskTarget{Bus: "virtio"}}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &vmletv1.VirtualMachineInstanceSpec{}
			spec.Domain.Devices.Disks = tt.disks
			for _, v := range tt.vols {
				spec.Volumes = append(spec.Volumes, vmletv1.Volume{Name: v})
			}
			before := spec.DeepCopy()
			got := vmletv1.EffectiveDisks(spec)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("EffectiveDisks() = %+v, want %+v", got, tt.want)
			}
			if !reflect.DeepEqual(spec, before) {
				t.Errorf("EffectiveDisks modified its argument")
			}
		})
	}
}

func TestEffectiveNetworks(t *testing.T) {
	no := false
	masq := vmletv1.Interface{Name: "net", InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}
	pod := vmletv1.Network{Name: "net", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}
	tests := []struct {
		name       string
		spec       vmletv1.VirtualMachineInstanceSpec
		wantIfaces []string
		wantNets   []string
		wantBind   vmletv1.BindingMethod
	}{{
		name:       "empty spec gets the default pod interface",
		wantIfaces: []string{"default"}, wantNets: []string{"default"}, wantBind: vmletv1.BindingBridge,
	}, {
		name: "autoattachPodInterface false gets nothing",
		spec: vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{Devices: vmletv1.Devices{AutoattachPodInterface: &no}}},
	}, {
		name: "explicit interfaces are kept",
		spec: vmletv1.VirtualMachineInstanceSpec{
			Domain:   vmletv1.DomainSpec{Devices: vmletv1.Devices{Interfaces: []vmletv1.Interface{masq}}},
			Networks: []vmletv1.Network{pod},
		},
		wantIfaces: []string{"net"}, wantNets: []string{"net"}, wantBind: vmletv1.BindingMasquerade,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ifaces, nets := vmletv1.EffectiveNetworks(&tt.spec)
			if got := ifaceNames(ifaces); !reflect.DeepEqual(got, tt.wantIfaces) {
				t.Errorf("interfaces = %v, want %v", got, tt.wantIfaces)
			}
			var gotNets []string
			for _, n := range nets {
				gotNets = append(gotNets, n.Name)
			}
			if !reflect.DeepEqual(gotNets, tt.wantNets) {
				t.Errorf("networks = %v, want %v", gotNets, tt.wantNets)
			}
			if len(ifaces) > 0 && ifaces[0].Binding() != tt.wantBind {
				t.Errorf("binding = %q, want %q", ifaces[0].Binding(), tt.wantBind)
			}
		})
	}
}

func ifaceNames(ifaces []vmletv1.Interface) []string {
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	return names
}

func TestVolumeHotpluggable(t *testing.T) {
	pvc := func(hot bool) vmletv1.Volume {
		return vmletv1.Volume{Name: "v", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "c"}, Hotpluggable: hot}}}
	}
	dv := vmletv1.Volume{Name: "v", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "d", Hotpluggable: true}}}
	cd := vmletv1.Volume{Name: "v", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "i"}}}
	for _, tt := range []struct {
		name string
		vol  vmletv1.Volume
		want bool
	}{{"hotpluggable pvc", pvc(true), true}, {"plain pvc", pvc(false), false}, {"hotpluggable dataVolume", dv, true}, {"containerDisk", cd, false}} {
		if got := tt.vol.Hotpluggable(); got != tt.want {
			t.Errorf("%s: Hotpluggable() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
