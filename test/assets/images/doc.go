// Package images builds the OCI images vmlet boots from, in Go with go-containerregistry:
// KubeVirt containerDisks (one disk file under /disk/) and kernelBoot images (a kernel and an
// initrd at given paths), each a single gzip tar layer on an empty image, written as OCI layouts
// on disk. Tests serve them from an in-process registry (storage/storagetest); `make run` writes
// the test guest as a layout that `vmlet local --image` points the demo's image reference at
// (hack/guestimage).
//
// Layers are reproducible: fixed owner (107:107, QEMU's uid in KubeVirt's containerDisks), mode
// and a zero modification time, so the same files always give the same image digest.
//
// Equivalent by hand: a Dockerfile `FROM scratch` + `ADD --chown=107:107 disk.qcow2 /disk/`,
// then `skopeo copy docker-daemon:IMG oci:DIR:TAG`.
package images
