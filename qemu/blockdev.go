package qemu

// Block device JSON for blockdev-add and device_add. The same objects are sent over QMP for
// cold plug, hotplug and migration targets, and (SATA only) put on the command line as JSON:
// one description, no option-string escaping anywhere.

// hostDriver is the protocol driver for the disk's path: "file" for regular files,
// "host_device" for block devices, "host_cdrom" for a block device used as a CD-ROM.
func hostDriver(isBlockDevice, cdrom bool) string {
	switch {
	case isBlockDevice && cdrom:
		return "host_cdrom"
	case isBlockDevice:
		return "host_device"
	default:
		return "file"
	}
}

// blockdevCache is BlockdevCacheOptions for the cache mode.
func blockdevCache(c CacheMode) map[string]any {
	return map[string]any{"direct": c.direct(), "no-flush": c == CacheUnsafe}
}

// fileNodeArgs is the blockdev-add argument for the protocol node of d (defaults applied)
// opening filename: d.Path, or the fdset of d's handed files ("/dev/fdset/N", diskfiles.go).
func fileNodeArgs(d Disk, driver, filename string) map[string]any {
	return map[string]any{
		"driver":    driver,
		"node-name": fileNodeName(d.ID),
		"filename":  filename,
		"aio":       string(d.AIO),
		"cache":     blockdevCache(d.Cache),
		"read-only": d.ReadOnly,
	}
}

// formatNodeArgs is the blockdev-add argument for the format node of d on top of its file node.
func formatNodeArgs(d Disk) map[string]any {
	return map[string]any{
		"driver":    string(d.Format),
		"node-name": formatNodeName(d.ID),
		"file":      fileNodeName(d.ID),
		"cache":     blockdevCache(d.Cache),
		"read-only": d.ReadOnly,
	}
}

// diskDeviceArgs is the device_add argument for d sitting in slot (see layout).
func diskDeviceArgs(d Disk, slot int) map[string]any {
	a := map[string]any{"id": d.ID, "drive": formatNodeName(d.ID)}
	switch d.Bus {
	case BusSATA:
		a["driver"] = pick(d.CDROM, "ide-cd", "ide-hd")
		a["bus"] = sataBus(slot)
	case BusSCSI:
		a["driver"] = pick(d.CDROM, "scsi-cd", "scsi-hd")
		a["bus"] = busSCSI
		a["scsi-id"] = slot - 1
		a["lun"] = 0
	default:
		a["driver"] = "virtio-blk-pci"
		a["bus"] = rootPortID(slot)
		a["addr"] = "0x0"
	}
	if d.Serial != "" {
		a["serial"] = d.Serial
	}
	if d.BootIndex > 0 {
		a["bootindex"] = d.BootIndex
	}
	if !d.CDROM {
		a["write-cache"] = pick(d.Cache == CacheWritethrough || d.Cache == CacheDirectSync, "off", "on")
	}
	return a
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}
