// Package storage turns KubeVirt's volume sources into disks the QEMU driver can open, with no
// Kubernetes types: the node agent translates a VMI's volumes and disks into the plain structs
// here.
//
// Plan is pure: volumes + disks + options → an ordered list of actions (pull an image, create
// an overlay, create an empty disk, build a cloud-init ISO, use a host path, link a kernel)
// and the resulting []qemu.Disk (and kernel boot paths). (*Host).Apply carries a plan out
// idempotently and undoes what it created if a step fails; PullFailed tells the caller which
// image's pull failed and whether retrying (with back-off) may help. Cleanup removes
// everything a VM's plans created (its VM folder). Host disks and claims outside the VM folder
// are never deleted.
//
// Sources (KubeVirt semantics):
//   - containerDisk: an OCI image with one disk under /disk/ (storage/oci), pulled into a shared
//     cache; the VM writes to a per-VM qcow2 overlay, deleted with the VM.
//   - emptyDisk: a sparse qcow2 of the capacity, deleted with the VM.
//   - hostDisk: Disk (must exist) or DiskOrCreate (sparse raw file made when missing), only
//     beneath a configured root; symlinks cannot lead out of it (openat2 RESOLVE_BENEATH).
//   - persistentVolumeClaim / dataVolume (local mode): a configured folder holding disk.img
//     (KubeVirt's filesystem PVC convention) or a block device.
//   - ephemeral: a qcow2 overlay over a claim's image.
//   - cloudInitNoCloud / cloudInitConfigDrive: an ISO built in Go (storage/cloudinit).
//   - kernelBoot (not a volume): kernel and initrd from an OCI image.
//
// Ownership: with Options.Owner (the launchers' user, 107 by default) Apply hands the VM the
// files it is given and nothing else (Grants, pure): its VM folder (0700) and the overlays,
// empty disks and ISOs in it (0600); hostDisk images and claims (files or block devices),
// chowned as KubeVirt's virt-handler chowns them for its qemu user, and left so after the VM.
// The shared image cache stays root's and world-readable: every VM may read a base image or
// kernel, none may write one. Launchers sharing one uid are separated from the host by this,
// not from each other (KubeVirt adds mount namespaces and SELinux categories for that).
//
// Disk ids derive from volume names (DiskID) within QEMU's id alphabet; paths only reach QEMU
// inside QMP JSON and are checked by qemu.Spec.Validate before a plan is returned.
//
// The node agent runs Plan and Apply itself in both modes; in cluster mode the launcher pod
// only mounts the results at the same paths (package controllers/launcherpod): the VM folder
// <--volume-root>/<vmi uid> and the image cache (read-only) are hostPath volumes of the pod.
// Kubelet image volumes and PVCs mounted into the launcher pod are not used.
package storage
