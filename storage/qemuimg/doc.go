// Package qemuimg runs qemu-img for the storage package: inspecting images it did not write
// (`qemu-img info --output=json`, under resource limits because the image may be hostile) and
// creating qcow2 images and overlays. Every call takes a context; paths must be absolute so
// that qemu-img never reads them as a protocol prefix ("nbd:", "json:").
package qemuimg
