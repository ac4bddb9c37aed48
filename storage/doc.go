// Package storage turns volume sources (containerDisk, emptyDisk, hostDisk, PVC, ephemeral
// overlays, cloud-init) into disks QEMU can open. No Kubernetes types.
package storage
