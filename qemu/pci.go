package qemu

import (
	"context"
	"encoding/json"
	"fmt"
)

// PCIAddr is a PCI function as the guest numbers it (bus numbers are those the guest's
// firmware or kernel programmed into the bridges), domain 0.
type PCIAddr struct{ Bus, Slot, Function int }

// PCIDevices maps the PCI address of every device that has a QEMU id to that id (disk and NIC
// ids, and vmlet's own devices such as the SCSI controller "scsi_0").
//
// QMP: query-pci.
func (vm *VM) PCIDevices(ctx context.Context) (map[PCIAddr]string, error) {
	var raw json.RawMessage
	if err := vm.mon.Execute(ctx, "query-pci", nil, &raw); err != nil {
		return nil, fmt.Errorf("pci devices: %w", err)
	}
	return ParseQueryPCI(raw)
}

// SCSIController is the id of the virtio-scsi controller SCSI disks sit on (PCIDevices
// names it so); a SCSI disk's target is its Port - 1, its LUN 0.
const SCSIController = devSCSI

type pciDevice struct {
	Bus      int    `json:"bus"`
	Slot     int    `json:"slot"`
	Function int    `json:"function"`
	QdevID   string `json:"qdev_id"`
	Bridge   *struct {
		Devices []pciDevice `json:"devices"`
	} `json:"pci_bridge"`
}

// ParseQueryPCI parses query-pci's reply: [{"bus": 0, "devices": [{"bus", "slot", "function",
// "qdev_id", "pci_bridge": {"devices": [...]}}]}], walking bridges (root ports) down.
func ParseQueryPCI(b []byte) (map[PCIAddr]string, error) {
	var buses []struct {
		Devices []pciDevice `json:"devices"`
	}
	if err := json.Unmarshal(b, &buses); err != nil {
		return nil, fmt.Errorf("parse query-pci: %w", err)
	}
	out := map[PCIAddr]string{}
	var walk func([]pciDevice)
	walk = func(devs []pciDevice) {
		for _, d := range devs {
			if d.QdevID != "" {
				out[PCIAddr{Bus: d.Bus, Slot: d.Slot, Function: d.Function}] = d.QdevID
			}
			if d.Bridge != nil {
				walk(d.Bridge.Devices)
			}
		}
	}
	for _, bus := range buses {
		walk(bus.Devices)
	}
	return out, nil
}
