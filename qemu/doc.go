// Package qemu is the hypervisor driver: it turns a domain spec (plain Go structs) into a QEMU
// command line, starts and supervises the QEMU process, and drives lifecycle, hotplug and live
// migration over QMP. No libvirt, no Kubernetes types.
//
// It owns:
//   - the domain spec (Spec, Disk, NIC, ...) and its validation (Validate): restricted id
//     alphabets, so nothing from a spec can inject a QEMU option;
//   - the pure argv builder (BuildArgv, golden-tested): the guest is created stopped (-S),
//     the QMP, serial and guest-agent sockets are bound by vmlet and inherited as listening
//     fds, kernel/initrd paths that are not plain go as /dev/fd/N, and disks and NICs are not
//     on the command line at all;
//   - Start, a named step list (validate, prepare-files, exec-qemu, connect-qmp,
//     attach-devices, refresh-boot-order, cont) whose failing step is reported by name and whose
//     completed steps are undone; disks and NICs are attached over QMP as JSON (blockdev-add +
//     device_add, getfd + netdev_add + device_add) by the same code for cold plug, hotplug and
//     migration targets. SATA disks are the one exception: AHCI has no hotplug, so QEMU refuses
//     device_add on it even before the guest starts; they go on the command line as JSON;
//   - disks given as open files instead of a path QEMU opens (Disk.Files, diskfiles.go: an
//     image outside QEMU's mount namespace): add-fd of each file into one fdset per disk, the
//     file node opens /dev/fdset/N, remove-fd when the disk is removed (or the attach undone);
//   - panic devices (panic.go: ISA pvpanic, pvpanic-pci) and what a guest panic does with
//     one (-action panic=pause, then the VM quits QEMU: ExitGuestPanic);
//   - the boot order: each device's bootindex, -boot strict=on (the firmware tries the
//     indexed devices only, as under libvirt), and a system_reset before the guest first runs
//     when a QMP-attached device has an index (QEMU builds the firmware's boot list at reset);
//   - the VM: one goroutine owns cmd.Wait, the exit is classified (guest shutdown, host quit,
//     guest panic, crash), lifecycle operations (Status, Pause, Resume, Reset, Powerdown, Shutdown, Quit,
//     Kill), hotplug (AddDisk, RemoveDisk, AddNIC, RemoveNIC) with PCIe root-port bookkeeping,
//     vCPU sockets (SetCPUs, CPUs: cpuhotplug.go) and virtio-mem memory (SetMemory, Memory:
//     memhotplug.go),
//     and migration (caps, params, incoming/outgoing over tcp, unix or fds, progress, cancel,
//     post-copy, completion stats), encrypted with QEMU's TLS (AddTLSCreds: tls-creds-x509
//     objects from a folder package pki writes, verify-peer both ways; MigrationParams.TLSCreds
//     and TLSHostname).
//
// The accelerator is KVM only when package accel says KVM is really usable, else TCG; Info
// reports which and why. Under TCG, auto-converge is refused (see SetMigrationCaps), and so is
// vCPU unplug (see SetCPUs).
//
// QMP and guest-agent protocol code lives in qemu/qmp and qemu/qga; the per-VM launcher that
// wires this package to the node agent lives in qemu/launcher.
package qemu
