package launcher

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
)

// fsInfoTimeout bounds DomainStats' guest-get-fsinfo (queue and command together): stats must
// come back quickly even when the agent is slow; an agent that does not answer in time costs
// the file systems of that one answer, not the RPC.
const fsInfoTimeout = 2 * time.Second

// guestFilesystems asks the guest agent for its file systems (guest-get-fsinfo) and names the
// disks under them (query-pci). No agent channel, an agent that is not connected, busy, slow
// or without the command: nil, and the reason at debug level.
func (l *api) guestFilesystems(ctx context.Context, d *domain) []*pb.FilesystemStats {
	if d.agent == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, fsInfoTimeout)
	defer cancel()
	var fss []qga.FS
	err := d.agent.use(ctx, func(ctx context.Context, g *qga.Agent) (err error) {
		fss, err = g.FSInfo(ctx)
		return err
	})
	if err != nil {
		if !errors.Is(err, ErrAgentNotConnected) {
			l.log.Debug("domain stats: guest file systems", "err", err)
		}
		return nil
	}
	var pci map[qemu.PCIAddr]string
	if needsPCI(fss) {
		if pci, err = d.vm.PCIDevices(ctx); err != nil {
			l.log.Debug("domain stats: pci devices for file systems", "err", err)
		}
	}
	return fsStats(fss, pci, d.vm.Disks())
}

// needsPCI reports whether any file system has a disk to name.
func needsPCI(fss []qga.FS) bool {
	for _, f := range fss {
		if len(f.Disks) > 0 {
			return true
		}
	}
	return false
}

// fsStats converts the agent's file systems, naming each one's disk with a vmlet disk id
// where one matches (diskID). Pure.
func fsStats(fss []qga.FS, pci map[qemu.PCIAddr]string, disks []qemu.Disk) []*pb.FilesystemStats {
	var out []*pb.FilesystemStats
	for _, f := range fss {
		s := &pb.FilesystemStats{MountPoint: f.Mountpoint, Type: f.Type}
		if f.TotalBytes != nil {
			s.TotalBytes = *f.TotalBytes
		}
		if f.UsedBytes != nil {
			s.UsedBytes = *f.UsedBytes
		}
		for _, disk := range f.Disks {
			if id := diskID(disk, pci, disks); id != "" {
				s.DiskName = id
				s.Device = strings.TrimPrefix(disk.Dev, "/dev/")
				break
			}
		}
		if s.Device == "" && len(f.Disks) > 0 {
			s.Device = strings.TrimPrefix(f.Disks[0].Dev, "/dev/")
		}
		out = append(out, s)
	}
	return out
}

// diskID finds the vmlet disk behind one of the agent's disk addresses: by serial when the
// agent reports one, else by PCI address: the virtio-blk function itself, or the SCSI
// controller plus target (the disk's Port - 1) and LUN 0. "" when none matches (a disk vmlet
// did not attach, SATA, or no PCI information).
func diskID(a qga.FSDisk, pci map[qemu.PCIAddr]string, disks []qemu.Disk) string {
	if a.Serial != "" {
		for _, d := range disks {
			if d.Serial != "" && d.Serial == a.Serial {
				return d.ID
			}
		}
	}
	if a.PCIController == nil || a.PCIController.Domain != 0 {
		return ""
	}
	p := a.PCIController
	qdev := pci[qemu.PCIAddr{Bus: p.Bus, Slot: p.Slot, Function: p.Function}]
	for _, d := range disks {
		switch d.Bus {
		case qemu.BusSCSI:
			if qdev == qemu.SCSIController && a.BusType == "scsi" && a.Target == d.Port-1 && a.Unit == 0 {
				return d.ID
			}
		case qemu.BusVirtio, "":
			if qdev != "" && qdev == d.ID {
				return d.ID
			}
		}
	}
	return ""
}
