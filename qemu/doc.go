// Package qemu is the hypervisor driver: it turns a domain spec (plain Go structs) into a QEMU
// command line, starts and supervises the QEMU process, and drives lifecycle, hotplug and live
// migration over QMP. No libvirt, no Kubernetes types.
package qemu
