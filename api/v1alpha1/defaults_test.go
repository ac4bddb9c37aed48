package v1alpha1_test

import (
	"reflect"
	"testing"

	v1alpha1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func TestEffectiveDisks(t *testing.T) {
	uint1 := uint(1)
	tests := []struct {
		name  string
		disks []v1alpha1.Disk
		vols  []string
		want  []v1alpha1.Disk
	}{{
		name: "volume without disk gets a virtio disk",
		vols: []string{"root"},
		want: []v1alpha1.Disk{{Name: "root", DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: "virtio"}}}},
	}, {
		name:  "disk without target becomes a virtio disk",
		disks: []v1alpha1.Disk{{Name: "root", BootOrder: &uint1}},
		vols:  []string{"root"},
		want:  []v1alpha1.Disk{{Name: "root", BootOrder: &uint1, DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: "virtio"}}}},
	}, {
		name: "buses default per device type and explicit buses stay",
		disks: []v1alpha1.Disk{
			{Name: "cd", DiskDevice: v1alpha1.DiskDevice{CDRom: &v1alpha1.CDRomTarget{}}},
			{Name: "lun", DiskDevice: v1alpha1.DiskDevice{LUN: &v1alpha1.LunTarget{}}},
			{Name: "sata", DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: "sata"}}},
		},
		vols: []string{"cd", "lun", "sata", "extra"},
		want: []v1alpha1.Disk{
			{Name: "cd", DiskDevice: v1alpha1.DiskDevice{CDRom: &v1alpha1.CDRomTarget{Bus: "sata"}}},
			{Name: "lun", DiskDevice: v1alpha1.DiskDevice{LUN: &v1alpha1.LunTarget{Bus: "scsi"}}},
			{Name: "sata", DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: "sata"}}},
			{Name: "extra", DiskDevice: v1alpha1.DiskDevice{Disk: &v1alpha1.DiskTarget{Bus: "virtio"}}},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &v1alpha1.VirtualMachineInstanceSpec{}
			spec.Domain.Devices.Disks = tt.disks
			for _, v := range tt.vols {
				spec.Volumes = append(spec.Volumes, v1alpha1.Volume{Name: v})
			}
			before := spec.DeepCopy()
			got := v1alpha1.EffectiveDisks(spec)
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
	masq := v1alpha1.Interface{Name: "net", InterfaceBindingMethod: v1alpha1.InterfaceBindingMethod{Masquerade: &v1alpha1.InterfaceMasquerade{}}}
	pod := v1alpha1.Network{Name: "net", NetworkSource: v1alpha1.NetworkSource{Pod: &v1alpha1.PodNetwork{}}}
	tests := []struct {
		name       string
		spec       v1alpha1.VirtualMachineInstanceSpec
		wantIfaces []string
		wantNets   []string
		wantBind   v1alpha1.BindingMethod
	}{{
		name:       "empty spec gets the default pod interface",
		wantIfaces: []string{"default"}, wantNets: []string{"default"}, wantBind: v1alpha1.BindingBridge,
	}, {
		name: "autoattachPodInterface false gets nothing",
		spec: v1alpha1.VirtualMachineInstanceSpec{Domain: v1alpha1.DomainSpec{Devices: v1alpha1.Devices{AutoattachPodInterface: &no}}},
	}, {
		name: "explicit interfaces are kept",
		spec: v1alpha1.VirtualMachineInstanceSpec{
			Domain:   v1alpha1.DomainSpec{Devices: v1alpha1.Devices{Interfaces: []v1alpha1.Interface{masq}}},
			Networks: []v1alpha1.Network{pod},
		},
		wantIfaces: []string{"net"}, wantNets: []string{"net"}, wantBind: v1alpha1.BindingMasquerade,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ifaces, nets := v1alpha1.EffectiveNetworks(&tt.spec)
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

func ifaceNames(ifaces []v1alpha1.Interface) []string {
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	return names
}

func TestVolumeHotpluggable(t *testing.T) {
	pvc := func(hot bool) v1alpha1.Volume {
		return v1alpha1.Volume{Name: "v", VolumeSource: v1alpha1.VolumeSource{PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: v1alpha1.PersistentVolumeClaimSource{ClaimName: "c"}, Hotpluggable: hot}}}
	}
	dv := v1alpha1.Volume{Name: "v", VolumeSource: v1alpha1.VolumeSource{DataVolume: &v1alpha1.DataVolumeSource{Name: "d", Hotpluggable: true}}}
	cd := v1alpha1.Volume{Name: "v", VolumeSource: v1alpha1.VolumeSource{ContainerDisk: &v1alpha1.ContainerDiskSource{Image: "i"}}}
	for _, tt := range []struct {
		name string
		vol  v1alpha1.Volume
		want bool
	}{{"hotpluggable pvc", pvc(true), true}, {"plain pvc", pvc(false), false}, {"hotpluggable dataVolume", dv, true}, {"containerDisk", cd, false}} {
		if got := tt.vol.Hotpluggable(); got != tt.want {
			t.Errorf("%s: Hotpluggable() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
