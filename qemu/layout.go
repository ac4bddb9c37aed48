package qemu

import "fmt"

// Slot namespaces. A virtio disk or a NIC takes a PCIe root port, a SCSI disk a target on the
// virtio-scsi controller, a SATA disk a port of the q35 AHCI controller.
const (
	maxSCSITargets = 256 // virtio-scsi max_target + 1
	maxSATAPorts   = 6   // ich9-ahci ports ide.0–ide.5
)

// slots is the number of slots of the bus's namespace (root ports are bounded by MaxRootPorts).
func (b DiskBus) slots() int {
	switch b {
	case BusSCSI:
		return maxSCSITargets
	case BusSATA:
		return maxSATAPorts
	default:
		return MaxRootPorts
	}
}

// namespace is the slot namespace of a disk: "pcie", "scsi" or "sata".
func (d Disk) namespace() string {
	switch d.withDefaults().Bus {
	case BusSCSI:
		return "scsi"
	case BusSATA:
		return "sata"
	default:
		return "pcie"
	}
}

// layout says where every disk and NIC sits: slot[id] is the 1-based root port (virtio disks,
// NICs), SCSI target + 1 (SCSI disks) or AHCI port + 1 (SATA disks).
type layout struct {
	rootPorts int
	slot      map[string]int
}

// layout assigns slots: explicit Port values first, then the lowest free slot of the device's
// namespace in spec order (disks, then NICs). There is one root port per virtio disk and NIC
// plus HotplugPorts. It is pure and deterministic, so a migration target built from the same
// spec gets the same layout.
func (s *Spec) layout() (layout, error) {
	type dev struct {
		field, id, ns string
		port, limit   int
	}
	var devs []dev
	pcie := 0
	for i, d := range s.Disks {
		ns := d.namespace()
		if ns == "pcie" {
			pcie++
		}
		devs = append(devs, dev{fmt.Sprintf("disks[%d].port", i), d.ID, ns, d.Port, d.withDefaults().Bus.slots()})
	}
	for i, n := range s.NICs {
		pcie++
		devs = append(devs, dev{fmt.Sprintf("nics[%d].port", i), n.ID, "pcie", n.Port, 0})
	}
	total := pcie + s.HotplugPorts
	if total > MaxRootPorts {
		return layout{}, specErr("hotplugPorts", fmt.Sprint(s.HotplugPorts),
			fmt.Sprintf("%d pcie devices plus hotplug ports exceed %d root ports", pcie, MaxRootPorts))
	}
	for i := range devs {
		if devs[i].ns == "pcie" {
			devs[i].limit = total
		}
	}
	l := layout{rootPorts: total, slot: make(map[string]int, len(devs))}
	used := map[string]map[int]string{"pcie": {}, "scsi": {}, "sata": {}}
	for _, d := range devs {
		if d.port == 0 {
			continue
		}
		if d.port > d.limit {
			return layout{}, specErr(d.field, fmt.Sprint(d.port), fmt.Sprintf("only %d %s slots", d.limit, d.ns))
		}
		if other, dup := used[d.ns][d.port]; dup {
			return layout{}, specErr(d.field, fmt.Sprint(d.port), "already used by "+other)
		}
		used[d.ns][d.port] = d.field
		l.slot[d.id] = d.port
	}
	for _, d := range devs {
		if d.port != 0 {
			continue
		}
		p := 1
		for used[d.ns][p] != "" {
			p++
		}
		if p > d.limit {
			return layout{}, specErr(d.field, "0", fmt.Sprintf("no free %s slot (%d)", d.ns, d.limit))
		}
		used[d.ns][p] = d.field
		l.slot[d.id] = p
	}
	return l, nil
}
