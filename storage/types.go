package storage

import (
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

// Volume is one VMI volume: a name (a DNS label) and exactly one source.
type Volume struct {
	Name                  string
	ContainerDisk         *ContainerDisk
	EmptyDisk             *EmptyDisk
	HostDisk              *HostDisk
	PersistentVolumeClaim *ClaimRef
	DataVolume            *ClaimRef // the claim named like the DataVolume
	Ephemeral             *ClaimRef // a throwaway overlay over the claim's image
	CloudInitNoCloud      *cloudinit.Source
	CloudInitConfigDrive  *cloudinit.Source
}

// ContainerDisk is an OCI image holding a disk.
type ContainerDisk struct {
	Image      string
	PullPolicy oci.PullPolicy // empty: oci.DefaultPullPolicy(Image)
	Path       string         // the disk's path in the image; empty: the one file in /disk/
	// Credentials are the image pull secret's registry logins (nil: anonymous).
	Credentials oci.Credentials
}

// EmptyDisk is a blank disk that lives and dies with the VM.
type EmptyDisk struct {
	CapacityBytes int64
}

// HostDiskType is KubeVirt's hostDisk type.
type HostDiskType string

// Host disk types.
const (
	HostDiskExisting HostDiskType = "Disk"         // the file must exist
	HostDiskOrCreate HostDiskType = "DiskOrCreate" // a sparse raw file is created if missing
)

// ClaimImage is the image file inside a Filesystem claim's folder (KubeVirt's convention).
const ClaimImage = "disk.img"

// HostDisk is a disk image file on the host.
type HostDisk struct {
	Path          string // absolute, clean, beneath Options.HostDiskRoot
	Type          HostDiskType
	CapacityBytes int64 // size of a DiskOrCreate file
}

// ClaimRef names a claim of Options.Claims.
type ClaimRef struct {
	ClaimName string
	ReadOnly  bool
}

// VolumeMode is how a claim is provided: a folder with disk.img, or a block device.
type VolumeMode string

// Volume modes.
const (
	Filesystem VolumeMode = "Filesystem"
	Block      VolumeMode = "Block"
)

// Claim is a local-mode persistent volume: what a claim name means on this host.
type Claim struct {
	Path string     // a folder (Filesystem) or a block device (Block)
	Mode VolumeMode // empty means Filesystem
	// CapacityBytes, if set, lets a Filesystem claim without disk.img get a sparse one of that
	// size (KubeVirt does the same for empty filesystem PVCs).
	CapacityBytes int64
	// Shared says every node a VM may migrate to opens this same Path (local mode's nodes
	// share one machine): a migration opens it on the target as it is instead of copying it,
	// as it does a ReadWriteMany claim. Storage itself does not read it.
	Shared bool
}

// DiskRequest is one VMI disk: how a volume appears to the guest. A volume without a
// DiskRequest gets a default virtio disk (KubeVirt's defaulting).
type DiskRequest struct {
	Name      string       // the volume's name
	Bus       qemu.DiskBus // empty: virtio (sata for a cdrom, scsi for a lun)
	ReadOnly  bool
	CDROM     bool
	LUN       bool // a SCSI disk (scsi-hd); no SCSI passthrough
	BootOrder int  // 0: not bootable
	Serial    string
	Cache     qemu.CacheMode
	IO        qemu.AIOMode
}

// KernelBoot boots a kernel (and initrd) taken from an OCI image (KubeVirt's
// firmware.kernelBoot.container).
type KernelBoot struct {
	Image      string
	PullPolicy oci.PullPolicy
	KernelPath string // in the image; required
	InitrdPath string // in the image; optional
	KernelArgs string
	// Credentials are the image pull secret's registry logins (nil: anonymous).
	Credentials oci.Credentials
}

// Options are the per-VM and per-host inputs of Plan.
type Options struct {
	// VMDir is the VM's own folder (absolute): overlays, empty disks, ISOs and kernel links go
	// there, and Cleanup removes it.
	VMDir string
	// HostDiskRoot is the folder hostDisk paths must be beneath; empty refuses hostDisks.
	HostDiskRoot string
	// Claims resolves persistentVolumeClaim, dataVolume and ephemeral claim names.
	Claims map[string]Claim
	// InstanceID and Hostname are cloud-init's meta data (KubeVirt: "<name>.<namespace>", name).
	InstanceID string
	Hostname   string
	// KernelBoot, if set, boots a kernel from an image.
	KernelBoot *KernelBoot
	// Owner, if set, is the VM's QEMU user: Apply hands it the VM's files (see Grants).
	// Nil leaves everything root's.
	Owner *Owner
}
