package qemu

import (
	"fmt"
)

// withDefaults returns the disk with empty enums filled in (raw, virtio, writeback, threads)
// and CDROM implying ReadOnly.
func (d Disk) withDefaults() Disk {
	if d.Format == "" {
		d.Format = FormatRaw
	}
	if d.Bus == "" {
		d.Bus = BusVirtio
	}
	if d.Cache == "" {
		d.Cache = CacheWriteback
	}
	if d.AIO == "" {
		d.AIO = AIOThreads
	}
	if d.CDROM {
		d.ReadOnly = true
	}
	return d
}

func (d Disk) validate(field string) error {
	d = d.withDefaults()
	if err := checkID(field+".id", d.ID); err != nil {
		return err
	}
	if err := checkPath(field+".path", d.Path); err != nil {
		return err
	}
	switch d.Format {
	case FormatRaw, FormatQCOW2:
	default:
		return specErr(field+".format", string(d.Format), `must be "raw" or "qcow2"`)
	}
	switch d.Bus {
	case BusVirtio, BusSATA, BusSCSI:
	default:
		return specErr(field+".bus", string(d.Bus), `must be "virtio", "sata" or "scsi"`)
	}
	if d.CDROM && d.Bus == BusVirtio {
		return specErr(field+".bus", string(d.Bus), "a cdrom needs the sata or scsi bus")
	}
	if d.Serial != "" && !serialRe.MatchString(d.Serial) {
		return specErr(field+".serial", d.Serial, "must be 1-20 of [A-Za-z0-9._-]")
	}
	if err := checkBootIndex(field, d.BootIndex); err != nil {
		return err
	}
	switch d.Cache {
	case CacheNone, CacheWriteback, CacheWritethrough, CacheDirectSync, CacheUnsafe:
	default:
		return specErr(field+".cache", string(d.Cache), "unknown cache mode")
	}
	switch d.AIO {
	case AIOThreads, AIOIOURing:
	case AIONative:
		if !d.Cache.direct() {
			return specErr(field+".aio", string(d.AIO), "native aio needs cache none or directsync")
		}
	default:
		return specErr(field+".aio", string(d.AIO), "unknown aio mode")
	}
	if limit := d.Bus.slots(); d.Port < 0 || d.Port > limit {
		return specErr(field+".port", fmt.Sprint(d.Port), fmt.Sprintf("must be 0-%d on bus %s", limit, d.Bus))
	}
	return d.validateFiles(field)
}

func (n NIC) validate(field string) error {
	if err := checkID(field+".id", n.ID); err != nil {
		return err
	}
	if err := checkMAC(field+".mac", n.MAC); err != nil {
		return err
	}
	if n.Model != "" && n.Model != "virtio" {
		return specErr(field+".model", n.Model, `only "virtio" is supported`)
	}
	switch {
	case len(n.TapFDs) > 0 && n.TapName != "":
		return specErr(field+".tapName", n.TapName, "set either tapFDs or tapName, not both")
	case len(n.TapFDs) == 0 && n.TapName == "":
		return specErr(field+".tapFDs", "", "a tap fd or a tap name is required")
	case n.TapName != "" && !tapNameRe.MatchString(n.TapName):
		return specErr(field+".tapName", n.TapName, "must be 1-15 of [A-Za-z0-9._-]")
	}
	for i, f := range n.TapFDs {
		if f == nil {
			return specErr(fmt.Sprintf("%s.tapFDs[%d]", field, i), "", "is nil")
		}
	}
	if n.Queues < 0 || n.Queues > maxNICQueues || len(n.TapFDs) > maxNICQueues {
		return specErr(field+".queues", fmt.Sprint(n.Queues), fmt.Sprintf("must be 0-%d", maxNICQueues))
	}
	if len(n.TapFDs) > 0 && n.Queues != 0 && n.Queues != len(n.TapFDs) {
		return specErr(field+".queues", fmt.Sprint(n.Queues), "must match the number of tap fds")
	}
	if n.Port < 0 || n.Port > MaxRootPorts {
		return specErr(field+".port", fmt.Sprint(n.Port), fmt.Sprintf("must be 0-%d", MaxRootPorts))
	}
	return checkBootIndex(field, n.BootIndex)
}

// MaxBootIndex is the largest BootIndex (the API's largest bootOrder).
const MaxBootIndex = 65535

func checkBootIndex(field string, i int) error {
	if i < 0 || i > MaxBootIndex {
		return specErr(field+".bootIndex", fmt.Sprint(i), fmt.Sprintf("must be 0-%d", MaxBootIndex))
	}
	return nil
}

// queues is the number of queue pairs of the NIC.
func (n NIC) queues() int {
	if len(n.TapFDs) > 0 {
		return len(n.TapFDs)
	}
	return max(n.Queues, 1)
}

func (c CacheMode) direct() bool { return c == CacheNone || c == CacheDirectSync }

// validateDevices checks disks and NICs, id uniqueness, boot indexes (unique across disks and
// NICs) and the root port layout.
func (s *Spec) validateDevices() error {
	ids := map[string]string{}
	boot := map[int]string{}
	uniqueBoot := func(field string, i int) error {
		if i == 0 {
			return nil
		}
		if other, dup := boot[i]; dup {
			return specErr(field+".bootIndex", fmt.Sprint(i), "already used by "+other)
		}
		boot[i] = field
		return nil
	}
	for i, d := range s.Disks {
		field := fmt.Sprintf("disks[%d]", i)
		if err := d.validate(field); err != nil {
			return err
		}
		if other, dup := ids[d.ID]; dup {
			return specErr(field+".id", d.ID, "already used by "+other)
		}
		ids[d.ID] = field
		if err := uniqueBoot(field, d.BootIndex); err != nil {
			return err
		}
	}
	for i, n := range s.NICs {
		field := fmt.Sprintf("nics[%d]", i)
		if err := n.validate(field); err != nil {
			return err
		}
		if other, dup := ids[n.ID]; dup {
			return specErr(field+".id", n.ID, "already used by "+other)
		}
		ids[n.ID] = field
		if err := uniqueBoot(field, n.BootIndex); err != nil {
			return err
		}
	}
	if s.HotplugPorts < 0 || s.HotplugPorts > MaxRootPorts {
		return specErr("hotplugPorts", fmt.Sprint(s.HotplugPorts), fmt.Sprintf("must be 0-%d", MaxRootPorts))
	}
	_, err := s.layout()
	return err
}

// qmpBootIndex reports whether a device attached over QMP (every disk but SATA ones, every
// NIC) has a boot index.
func (s *Spec) qmpBootIndex() bool {
	for _, d := range s.Disks {
		if d.withDefaults().Bus != BusSATA && d.BootIndex > 0 {
			return true
		}
	}
	for _, n := range s.NICs {
		if n.BootIndex > 0 {
			return true
		}
	}
	return false
}

// needsSCSI reports whether the virtio-scsi controller is present.
func (s *Spec) needsSCSI() bool {
	if s.SCSI {
		return true
	}
	for _, d := range s.Disks {
		if d.withDefaults().Bus == BusSCSI {
			return true
		}
	}
	return false
}
