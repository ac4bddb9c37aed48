package qemu

import (
	"reflect"
	"testing"
)

// TestNICDeviceArgs compares the whole device_add argument of a NIC.
func TestNICDeviceArgs(t *testing.T) {
	tests := []struct {
		name string
		nic  NIC
		want map[string]any
	}{
		{"plain", NIC{ID: "eth0", MAC: "52:54:00:AB:CD:EF", TapName: "tap0"}, map[string]any{
			"driver": "virtio-net-pci", "id": "eth0", "netdev": "n_eth0", "mac": "52:54:00:ab:cd:ef", "bus": "rp_2", "addr": "0x0"}},
		{"boot index", NIC{ID: "eth0", MAC: "52:54:00:12:34:56", TapName: "tap0", BootIndex: 1}, map[string]any{
			"driver": "virtio-net-pci", "id": "eth0", "netdev": "n_eth0", "mac": "52:54:00:12:34:56", "bus": "rp_2", "addr": "0x0",
			"bootindex": 1}},
		{"multiqueue", NIC{ID: "eth1", MAC: "52:54:00:12:34:56", TapName: "tap1", Queues: 4, BootIndex: 7}, map[string]any{
			"driver": "virtio-net-pci", "id": "eth1", "netdev": "n_eth1", "mac": "52:54:00:12:34:56", "bus": "rp_2", "addr": "0x0",
			"mq": true, "vectors": 10, "bootindex": 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nicDeviceArgs(tt.nic, 2); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("nicDeviceArgs:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

// TestQMPBootIndex: Start resets the machine before the guest runs exactly when a device it
// attaches over QMP (not a SATA disk, which is on the command line) has a boot index.
func TestQMPBootIndex(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want bool
	}{
		{"no devices", Spec{}, false},
		{"no index", Spec{Disks: []Disk{{ID: "a"}}, NICs: []NIC{{ID: "n"}}}, false},
		{"sata disk only", Spec{Disks: []Disk{{ID: "a", Bus: BusSATA, BootIndex: 1}}}, false},
		{"virtio disk (default bus)", Spec{Disks: []Disk{{ID: "a", BootIndex: 1}}}, true},
		{"scsi disk", Spec{Disks: []Disk{{ID: "a", Bus: BusSATA}, {ID: "b", Bus: BusSCSI, BootIndex: 2}}}, true},
		{"nic", Spec{Disks: []Disk{{ID: "a", Bus: BusSATA, BootIndex: 2}}, NICs: []NIC{{ID: "n", BootIndex: 1}}}, true},
	}
	for _, tt := range tests {
		if got := tt.spec.qmpBootIndex(); got != tt.want {
			t.Errorf("%s: qmpBootIndex = %v, want %v", tt.name, got, tt.want)
		}
	}
}
