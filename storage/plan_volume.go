package storage

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
)

// volumes checks every volume and plans its action and disk file.
func (pl *planner) volumes(volumes []Volume) error {
	ids := map[string]string{}
	for _, v := range volumes {
		if !dnsLabelRe.MatchString(v.Name) {
			return volErr(v.Name, ErrInvalidVolume, "name must be a DNS label")
		}
		if _, dup := pl.vols[v.Name]; dup {
			return volErr(v.Name, ErrInvalidVolume, "name used twice")
		}
		id := DiskID(v.Name)
		if other, dup := ids[id]; dup {
			return volErr(v.Name, ErrInvalidVolume, "disk id %s collides with volume %s", id, other)
		}
		ids[id] = v.Name
		vp, err := pl.volume(v, id)
		if err != nil {
			return err
		}
		pl.vols[v.Name] = vp
	}
	return nil
}

func (pl *planner) volume(v Volume, id string) (*volumePlan, error) {
	n := 0
	for _, set := range []bool{v.ContainerDisk != nil, v.EmptyDisk != nil, v.HostDisk != nil,
		v.PersistentVolumeClaim != nil, v.DataVolume != nil, v.Ephemeral != nil,
		v.CloudInitNoCloud != nil, v.CloudInitConfigDrive != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, volErr(v.Name, ErrInvalidVolume, "%d sources set, want exactly one", n)
	}
	file := filepath.Join(pl.opts.VMDir, disksDir, id)
	switch {
	case v.ContainerDisk != nil:
		cd := v.ContainerDisk
		if err := pl.pull(v.Name, cd.Image, cd.PullPolicy, cd.Credentials); err != nil {
			return nil, err
		}
		if cd.Path != "" && (!strings.HasPrefix(cd.Path, "/") || filepath.Clean(cd.Path) != cd.Path) {
			return nil, volErr(v.Name, ErrInvalidVolume, "containerDisk path %q must be absolute and clean", cd.Path)
		}
		a := Action{Kind: ActOverlay, Volume: v.Name, Path: file + ".qcow2", Image: cd.Image, ImagePath: cd.Path}
		return pl.add(a, qemu.FormatQCOW2, false)
	case v.EmptyDisk != nil:
		if v.EmptyDisk.CapacityBytes <= 0 {
			return nil, volErr(v.Name, ErrInvalidVolume, "emptyDisk capacity %d", v.EmptyDisk.CapacityBytes)
		}
		a := Action{Kind: ActEmpty, Volume: v.Name, Path: file + ".qcow2", SizeBytes: v.EmptyDisk.CapacityBytes}
		return pl.add(a, qemu.FormatQCOW2, false)
	case v.HostDisk != nil:
		return pl.hostDisk(v.Name, v.HostDisk)
	case v.PersistentVolumeClaim != nil, v.DataVolume != nil:
		ref := v.PersistentVolumeClaim
		if ref == nil {
			ref = v.DataVolume
		}
		return pl.claim(v.Name, ref)
	case v.Ephemeral != nil:
		return pl.ephemeral(v.Name, v.Ephemeral, file+".qcow2")
	default:
		kind, src := cloudinit.NoCloud, v.CloudInitNoCloud
		if src == nil {
			kind, src = cloudinit.ConfigDrive, v.CloudInitConfigDrive
		}
		if pl.cloudInits++; pl.cloudInits > 1 {
			return nil, volErr(v.Name, ErrInvalidVolume, "a second cloud-init volume")
		}
		cfg, err := cloudinit.NewConfig(kind, *src, cloudinit.MetaData{InstanceID: pl.opts.InstanceID, Hostname: pl.opts.Hostname})
		if err != nil {
			return nil, volErr(v.Name, fmt.Errorf("%w: %w", ErrInvalidVolume, err), "cloud-init")
		}
		a := Action{Kind: ActISO, Volume: v.Name, Path: file + ".iso", CloudInit: cfg}
		return pl.add(a, qemu.FormatRaw, false)
	}
}

func (pl *planner) add(a Action, format qemu.DiskFormat, readOnly bool) (*volumePlan, error) {
	pl.volActions = append(pl.volActions, a)
	return &volumePlan{path: a.Path, format: format, readOnly: readOnly}, nil
}

// hostDisk plans a hostDisk: the path must be absolute, clean (so no ".." at all) and beneath
// HostDiskRoot; Apply then resolves it with symlinks confined to the root.
func (pl *planner) hostDisk(name string, hd *HostDisk) (*volumePlan, error) {
	root := pl.opts.HostDiskRoot
	if root == "" {
		return nil, volErr(name, ErrOutsideRoot, "hostDisk %q: no host disk root configured", hd.Path)
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return nil, volErr(name, ErrInvalidVolume, "host disk root %q must be an absolute clean path", root)
	}
	if !filepath.IsAbs(hd.Path) || filepath.Clean(hd.Path) != hd.Path {
		return nil, volErr(name, ErrOutsideRoot, "hostDisk %q must be an absolute clean path", hd.Path)
	}
	if !beneath(root, hd.Path) {
		return nil, volErr(name, ErrOutsideRoot, "hostDisk %q is not beneath %s", hd.Path, root)
	}
	a := Action{Kind: ActHostPath, Volume: name, Path: hd.Path, Root: root}
	switch hd.Type {
	case HostDiskExisting:
	case HostDiskOrCreate:
		if hd.CapacityBytes <= 0 {
			return nil, volErr(name, ErrInvalidVolume, "DiskOrCreate capacity %d", hd.CapacityBytes)
		}
		a.Create, a.SizeBytes = true, hd.CapacityBytes
	default:
		return nil, volErr(name, ErrInvalidVolume, "hostDisk type %q", hd.Type)
	}
	return pl.add(a, qemu.FormatRaw, false)
}

// claimImage resolves a claim to its image: (path, root it must stay beneath, block).
func (pl *planner) claimImage(name string, ref *ClaimRef) (string, string, bool, Claim, error) {
	c, ok := pl.opts.Claims[ref.ClaimName]
	if !ok {
		return "", "", false, c, volErr(name, ErrUnknownClaim, "claim %q", ref.ClaimName)
	}
	if !filepath.IsAbs(c.Path) || filepath.Clean(c.Path) != c.Path {
		return "", "", false, c, volErr(name, ErrInvalidVolume, "claim %q path %q must be absolute and clean", ref.ClaimName, c.Path)
	}
	switch c.Mode {
	case Filesystem, "":
		return filepath.Join(c.Path, ClaimImage), c.Path, false, c, nil
	case Block:
		return c.Path, "", true, c, nil
	}
	return "", "", false, c, volErr(name, ErrUnsupportedMode, "claim %q volume mode %q", ref.ClaimName, c.Mode)
}

func (pl *planner) claim(name string, ref *ClaimRef) (*volumePlan, error) {
	p, root, block, c, err := pl.claimImage(name, ref)
	if err != nil {
		return nil, err
	}
	a := Action{Kind: ActHostPath, Volume: name, Path: p, Root: root, Block: block}
	if !block && c.CapacityBytes > 0 && !ref.ReadOnly {
		a.Create, a.SizeBytes = true, c.CapacityBytes
	}
	return pl.add(a, qemu.FormatRaw, ref.ReadOnly)
}

func (pl *planner) ephemeral(name string, ref *ClaimRef, overlay string) (*volumePlan, error) {
	p, root, block, _, err := pl.claimImage(name, ref)
	if err != nil {
		return nil, err
	}
	a := Action{Kind: ActOverlay, Volume: name, Path: overlay, Backing: p, BackingRoot: root,
		BackingFormat: qemu.FormatRaw, Block: block}
	return pl.add(a, qemu.FormatQCOW2, false)
}

// disks turns DiskRequests (then defaults for volumes without one) into qemu.Disks.
func (pl *planner) disks(volumes []Volume, reqs []DiskRequest) error {
	for _, r := range reqs {
		vp, ok := pl.vols[r.Name]
		if !ok {
			return volErr(r.Name, ErrUnknownVolume, "disk %s", r.Name)
		}
		if vp.used {
			return volErr(r.Name, ErrInvalidDisk, "two disks use the volume")
		}
		d, err := diskFor(r, vp)
		if err != nil {
			return volErr(r.Name, err, "disk")
		}
		vp.used = true
		pl.plan.Disks = append(pl.plan.Disks, d)
		pl.plan.DiskVolumes[d.ID] = r.Name
	}
	for _, v := range volumes {
		if vp := pl.vols[v.Name]; !vp.used {
			d, err := diskFor(DiskRequest{Name: v.Name}, vp)
			if err != nil {
				return volErr(v.Name, err, "default disk")
			}
			vp.used = true
			pl.plan.Disks = append(pl.plan.Disks, d)
			pl.plan.DiskVolumes[d.ID] = v.Name
		}
	}
	return nil
}

func diskFor(r DiskRequest, vp *volumePlan) (qemu.Disk, error) {
	d := qemu.Disk{ID: DiskID(r.Name), Path: vp.path, Format: vp.format, ReadOnly: r.ReadOnly || vp.readOnly,
		Bus: r.Bus, CDROM: r.CDROM, Serial: r.Serial, BootIndex: r.BootOrder, Cache: r.Cache, AIO: r.IO}
	switch {
	case r.CDROM && r.LUN:
		return d, fmt.Errorf("both cdrom and lun: %w", ErrInvalidDisk)
	case r.CDROM:
		d.ReadOnly = true
		if d.Bus == "" {
			d.Bus = qemu.BusSATA
		}
	case r.LUN:
		if d.Bus != "" && d.Bus != qemu.BusSCSI {
			return d, fmt.Errorf("a lun needs the scsi bus, not %s: %w", d.Bus, ErrInvalidDisk)
		}
		d.Bus = qemu.BusSCSI
	case d.Bus == "":
		d.Bus = qemu.BusVirtio
	}
	if r.BootOrder < 0 {
		return d, fmt.Errorf("boot order %d: %w", r.BootOrder, ErrInvalidDisk)
	}
	return d, nil
}

// beneath reports whether p is strictly inside root (both absolute and clean).
func beneath(root, p string) bool {
	if root == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, root+"/")
}
