package translate

import (
	"errors"
	"fmt"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/storage/cloudinit"
	"github.com/vmlet/vmlet/storage/oci"
)

// StorageEnv is the node's storage configuration, as plain data for the translation.
type StorageEnv struct {
	// HostDiskRoot is the folder hostDisk paths must be beneath; empty refuses hostDisks.
	HostDiskRoot string
	// Claims resolves persistentVolumeClaim, dataVolume and ephemeral claim names on this node
	// (local mode has no PersistentVolumes): keys are "namespace/name", or "name" for a claim
	// of that name in any namespace.
	Claims map[string]storage.Claim
	// ImageSources maps an image reference as written in a VMI to the reference this node
	// pulls instead (a mirror, or an OCI layout "oci:/dir:tag"); unmapped references are
	// pulled as written.
	ImageSources map[string]string
	// Owner is the launchers' user: each VMI's files are handed to it (storage.Grants); nil
	// leaves them root's (launchers running as root).
	Owner *storage.Owner
}

// Referenced holds the objects a VMI refers to, read by the reconciler so that the translation
// stays pure.
type Referenced struct {
	// Secrets are the VMI's cloud-init secrets (secretRef, networkDataSecretRef) by name.
	Secrets map[string]map[string][]byte
	// PullSecrets are the logins of the VMI's image pull secrets by Secret name.
	PullSecrets map[string]oci.Credentials
}

// Keys of cloud-init secrets, as KubeVirt reads them (either spelling).
var (
	userDataKeys    = []string{"userdata", "userData"}
	networkDataKeys = []string{"networkdata", "networkData"}
)

// HotplugVolume is a hotpluggable volume: planned on its own, so that a volume that cannot be
// attached never fails the running VMI; it is attached after the guest started.
type HotplugVolume struct {
	Name string
	// Plan holds the volume and its one disk; nil when Err is set.
	Plan *storage.VMPlan
	// Err says why the volume cannot be attached (a *SpecError).
	Err error
}

// storageDomain translates the VMI's volumes, disks and kernel boot into storage plans: one for
// everything attached at boot (and the kernel), one per hotpluggable volume.
func storageDomain(vmi *vmletv1.VirtualMachineInstance, env NodeEnv, refs Referenced) (*storage.VMPlan, []HotplugVolume, error) {
	opts, err := storageOptions(vmi, env, refs)
	if err != nil {
		return nil, nil, err
	}
	disks := vmletv1.EffectiveDisks(&vmi.Spec)
	diskIndex := map[string]int{}
	for i, d := range vmi.Spec.Domain.Devices.Disks {
		diskIndex[d.Name] = i
	}
	var coldVols []storage.Volume
	coldReqs := map[string]storage.DiskRequest{}
	var hot []HotplugVolume
	volIndex := map[string]int{}
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		volIndex[v.Name] = i
		sv, err := storageVolume(v, i, vmi.Namespace, env.Storage, refs)
		if err != nil {
			if !v.Hotpluggable() {
				return nil, nil, err
			}
			hot = append(hot, HotplugVolume{Name: v.Name, Err: err})
			continue
		}
		d, err := diskRequest(disks, v.Name, diskIndex)
		if err != nil {
			if !v.Hotpluggable() {
				return nil, nil, err
			}
			hot = append(hot, HotplugVolume{Name: v.Name, Err: err})
			continue
		}
		if !v.Hotpluggable() {
			coldVols, coldReqs[v.Name] = append(coldVols, sv), d
			continue
		}
		hopts := opts
		hopts.KernelBoot = nil
		p, err := storage.Plan([]storage.Volume{sv}, []storage.DiskRequest{d}, hopts)
		if err == nil && d.Bus == qemu.BusSATA {
			err = &SpecError{Field: fmt.Sprintf("spec.domain.devices.disks[%d]", diskIndex[v.Name]),
				Reason: fmt.Sprintf("disk %q: sata disks cannot be hotplugged (use virtio or scsi)", v.Name), Err: ErrUnsupported}
		} else if err != nil {
			err = planError(err, volIndex, diskIndex, "")
		}
		if err != nil {
			hot = append(hot, HotplugVolume{Name: v.Name, Err: err})
			continue
		}
		hot = append(hot, HotplugVolume{Name: v.Name, Plan: p})
	}
	// Disks in the guest's order: the spec's disks, then defaults for volumes without one.
	var coldDisks []storage.DiskRequest
	for _, d := range disks {
		if r, ok := coldReqs[d.Name]; ok {
			coldDisks = append(coldDisks, r)
		}
	}
	// No bootOrder anywhere: the first disk boots, as in KubeVirt (see bootorder.go).
	if !anyBootOrder(&vmi.Spec) {
		if i := defaultBootDisk(coldDisks); i >= 0 {
			coldDisks[i].BootOrder = 1
		}
	}
	p, err := storage.Plan(coldVols, coldDisks, opts)
	if err != nil {
		args := ""
		if opts.KernelBoot != nil {
			args = opts.KernelBoot.KernelArgs
		}
		return nil, nil, planError(err, volIndex, diskIndex, args)
	}
	return p, hot, nil
}

// storageOptions are the per-VMI inputs of storage.Plan.
func storageOptions(vmi *vmletv1.VirtualMachineInstance, env NodeEnv, refs Referenced) (storage.Options, error) {
	host := vmi.Spec.Hostname
	if host == "" {
		host = vmi.Name
	}
	opts := storage.Options{
		VMDir:        env.VolumeDir,
		HostDiskRoot: env.Storage.HostDiskRoot,
		Claims:       map[string]storage.Claim{},
		InstanceID:   vmi.Name + "." + vmi.Namespace,
		Hostname:     host,
		Owner:        env.Storage.Owner,
	}
	for _, v := range vmi.Spec.Volumes {
		if name := claimName(&v); name != "" {
			if c, ok := LookupClaim(env.Storage.Claims, vmi.Namespace, name); ok {
				opts.Claims[name] = c
			}
		}
	}
	fw := vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil {
		return opts, nil
	}
	kb := fw.KernelBoot
	if kb.Container == nil {
		return opts, &SpecError{Field: "spec.domain.firmware.kernelBoot.container", Reason: "kernelBoot needs a container with the kernel"}
	}
	if kb.Container.KernelPath == "" {
		return opts, &SpecError{Field: "spec.domain.firmware.kernelBoot.container.kernelPath", Reason: "kernelBoot needs the kernel's path in the image"}
	}
	creds, err := pullCredentials(refs, kb.Container.ImagePullSecret, "spec.domain.firmware.kernelBoot.container.imagePullSecret")
	if err != nil {
		return opts, err
	}
	opts.KernelBoot = &storage.KernelBoot{
		Credentials: creds,
		Image:       imageSource(env.Storage, kb.Container.Image),
		PullPolicy:  oci.PullPolicy(kb.Container.ImagePullPolicy),
		KernelPath:  kb.Container.KernelPath,
		InitrdPath:  kb.Container.InitrdPath,
		KernelArgs:  kb.KernelArgs,
	}
	return opts, nil
}

func imageSource(env StorageEnv, image string) string {
	if src, ok := env.ImageSources[image]; ok {
		return src
	}
	return image
}

func claimName(v *vmletv1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.DataVolume != nil:
		return v.DataVolume.Name
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		return v.Ephemeral.PersistentVolumeClaim.ClaimName
	}
	return ""
}

// LookupClaim finds a claim of namespace in a node's claims: "namespace/name" first, then
// "name" (a claim of that name in any namespace).
func LookupClaim(claims map[string]storage.Claim, namespace, name string) (storage.Claim, bool) {
	if c, ok := claims[namespace+"/"+name]; ok {
		return c, true
	}
	c, ok := claims[name]
	return c, ok
}

// storageVolume translates one volume source.
func storageVolume(v *vmletv1.Volume, i int, namespace string, env StorageEnv, refs Referenced) (storage.Volume, error) {
	field := fmt.Sprintf("spec.volumes[%d]", i)
	sv := storage.Volume{Name: v.Name}
	switch {
	case v.ContainerDisk != nil:
		cd := v.ContainerDisk
		creds, err := pullCredentials(refs, cd.ImagePullSecret, field+".containerDisk.imagePullSecret")
		if err != nil {
			return sv, err
		}
		sv.ContainerDisk = &storage.ContainerDisk{Image: imageSource(env, cd.Image),
			PullPolicy: oci.PullPolicy(cd.ImagePullPolicy), Path: cd.Path, Credentials: creds}
	case v.EmptyDisk != nil:
		sv.EmptyDisk = &storage.EmptyDisk{CapacityBytes: v.EmptyDisk.Capacity.Value()}
	case v.HostDisk != nil:
		hd := v.HostDisk
		// shared only tells a migration that the path is the same file on every node: vmlet
		// runs a VMI on one node, so it changes nothing here.
		sv.HostDisk = &storage.HostDisk{Path: hd.Path, Type: storage.HostDiskType(hd.Type), CapacityBytes: hd.Capacity.Value()}
	case v.PersistentVolumeClaim != nil:
		sv.PersistentVolumeClaim = &storage.ClaimRef{ClaimName: v.PersistentVolumeClaim.ClaimName, ReadOnly: v.PersistentVolumeClaim.ReadOnly}
	case v.DataVolume != nil:
		sv.DataVolume = &storage.ClaimRef{ClaimName: v.DataVolume.Name}
	case v.Ephemeral != nil:
		pvc := v.Ephemeral.PersistentVolumeClaim
		if pvc == nil {
			return sv, &SpecError{Field: field + ".ephemeral.persistentVolumeClaim", Reason: fmt.Sprintf("volume %q: ephemeral needs a persistentVolumeClaim", v.Name)}
		}
		sv.Ephemeral = &storage.ClaimRef{ClaimName: pvc.ClaimName, ReadOnly: pvc.ReadOnly}
	case v.CloudInitNoCloud != nil:
		src, err := cloudInitSource(&v.CloudInitNoCloud.CloudInitData, field+".cloudInitNoCloud", refs)
		if err != nil {
			return sv, err
		}
		sv.CloudInitNoCloud = src
	case v.CloudInitConfigDrive != nil:
		src, err := cloudInitSource(&v.CloudInitConfigDrive.CloudInitData, field+".cloudInitConfigDrive", refs)
		if err != nil {
			return sv, err
		}
		sv.CloudInitConfigDrive = src
	default:
		return sv, &SpecError{Field: field, Reason: fmt.Sprintf("volume %q has no source", v.Name)}
	}
	return sv, nil
}

// cloudInitSource resolves secret references into the data storage builds the ISO from.
func cloudInitSource(d *vmletv1.CloudInitData, field string, refs Referenced) (*cloudinit.Source, error) {
	src := &cloudinit.Source{UserData: d.UserData, UserDataBase64: d.UserDataBase64,
		NetworkData: d.NetworkData, NetworkDataBase64: d.NetworkDataBase64}
	if d.UserDataSecretRef != nil {
		b, err := secretValue(refs, d.UserDataSecretRef.Name, userDataKeys, field+".secretRef")
		if err != nil {
			return nil, err
		}
		src.UserData = string(b)
	}
	if d.NetworkDataSecretRef != nil {
		b, err := secretValue(refs, d.NetworkDataSecretRef.Name, networkDataKeys, field+".networkDataSecretRef")
		if err != nil {
			return nil, err
		}
		src.NetworkData = string(b)
	}
	return src, nil
}

// pullCredentials are the logins of an image pull secret ("": none).
func pullCredentials(refs Referenced, name, field string) (oci.Credentials, error) {
	if name == "" {
		return nil, nil
	}
	creds, ok := refs.PullSecrets[name]
	if !ok {
		return nil, &SpecError{Field: field, Reason: fmt.Sprintf("image pull secret %q was not read", name)}
	}
	return creds, nil
}

func secretValue(refs Referenced, name string, keys []string, field string) ([]byte, error) {
	data, ok := refs.Secrets[name]
	if !ok {
		return nil, &SpecError{Field: field, Reason: fmt.Sprintf("secret %q was not read", name)}
	}
	for _, k := range keys {
		if b, ok := data[k]; ok {
			return b, nil
		}
	}
	return nil, &SpecError{Field: field, Reason: fmt.Sprintf("secret %q has none of the keys %q", name, keys)}
}

// diskRequest translates the effective disk of a volume.
func diskRequest(disks []vmletv1.Disk, name string, diskIndex map[string]int) (storage.DiskRequest, error) {
	var d *vmletv1.Disk
	for i := range disks {
		if disks[i].Name == name {
			d = &disks[i]
			break
		}
	}
	if d == nil { // EffectiveDisks gives every volume a disk
		return storage.DiskRequest{}, &SpecError{Field: "spec.domain.devices.disks", Reason: fmt.Sprintf("no disk for volume %q", name)}
	}
	field := fmt.Sprintf("spec.domain.devices.disks[%d]", diskIndex[name])
	unsupported := func(sub, what string) error {
		return &SpecError{Field: field + sub, Reason: fmt.Sprintf("disk %q: %s is not supported yet", name, what), Err: ErrUnsupported}
	}
	r := storage.DiskRequest{Name: name, Serial: d.Serial, Cache: qemu.CacheMode(d.Cache), IO: qemu.AIOMode(d.IO)}
	if d.BootOrder != nil {
		r.BootOrder = int(*d.BootOrder)
	}
	if d.DedicatedIOThread != nil && *d.DedicatedIOThread {
		return r, unsupported(".dedicatedIOThread", "a dedicated I/O thread")
	}
	switch {
	case d.CDRom != nil:
		if d.CDRom.ReadOnly != nil && !*d.CDRom.ReadOnly {
			return r, unsupported(".cdrom.readonly", "a writable cdrom")
		}
		if d.CDRom.Tray == vmletv1.TrayStateOpen {
			return r, unsupported(".cdrom.tray", "an open cdrom tray")
		}
		r.CDROM, r.ReadOnly, r.Bus = true, true, qemu.DiskBus(d.CDRom.Bus)
	case d.LUN != nil:
		r.LUN, r.ReadOnly, r.Bus = true, d.LUN.ReadOnly, qemu.DiskBus(d.LUN.Bus)
	case d.Disk != nil:
		if d.Disk.PciAddress != "" {
			return r, unsupported(".disk.pciAddress", "a fixed PCI address")
		}
		r.ReadOnly, r.Bus = d.Disk.ReadOnly, qemu.DiskBus(d.Disk.Bus)
	}
	return r, nil
}

// planError names the spec field a storage.Plan error is about; the storage error stays in the
// chain for storage.Reason. An error about no volume is the kernel boot's, or one of the disks
// failing QEMU's checks (which one, QEMU's message says): kernelArgs tell them apart.
func planError(err error, volIndex, diskIndex map[string]int, kernelArgs string) error {
	var ve *storage.VolumeError
	if !errors.As(err, &ve) {
		return &SpecError{Field: "spec.volumes", Reason: err.Error(), Err: err}
	}
	field := "spec.domain.firmware.kernelBoot"
	if ve.Volume == "" && errors.Is(err, storage.ErrInvalidDisk) {
		field = "spec.domain.devices.disks"
		if (&qemu.Spec{Name: "args", MemoryMiB: qemu.MinMemoryMiB, Boot: qemu.Boot{Kernel: "/kernel", Cmdline: kernelArgs}}).Validate() != nil {
			field = "spec.domain.firmware.kernelBoot.kernelArgs"
		}
	}
	if ve.Volume != "" {
		field = "spec.volumes"
		if i, ok := volIndex[ve.Volume]; ok {
			field = fmt.Sprintf("spec.volumes[%d]", i)
		}
		if i, ok := diskIndex[ve.Volume]; ok && (errors.Is(err, storage.ErrInvalidDisk) || errors.Is(err, storage.ErrUnknownVolume)) {
			field = fmt.Sprintf("spec.domain.devices.disks[%d]", i)
		}
	}
	return &SpecError{Field: field, Reason: err.Error(), Err: err}
}
