package main

import (
	"strings"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Guest is the one VM definition every mode runs: the same kernel, initramfs, command line,
// vCPUs, memory, TCG cache, machine and devices (serial console on a unix socket, the guest
// agent channel on virtio-serial, one free PCIe root port for hotplug).
type Guest struct {
	Name        string
	Kernel      string
	Initrd      string
	Cmdline     string
	VCPUs       int
	MemoryMiB   int
	TCGCacheMiB int // -accel tcg,tb-size; libvirt <tcg><tb-cache>
	// Machine is the q35 machine type; "q35" is QEMU's alias for the newest pc-q35-X.Y (libvirt
	// writes the versioned name it resolves to, the same machine).
	Machine string
	// Sockets and logs, for libvirt and bare QEMU (the launcher keeps its own under its run dir).
	ConsoleSocket string
	ConsoleLog    string
	AgentSocket   string
	QMPSocket     string // bare QEMU only (libvirt and the launcher own their monitors)
}

// hotplugPorts is the number of free PCIe root ports every mode gets (libvirt adds one spare
// root port to a q35 domain on its own; vmlet's spec asks for it).
const hotplugPorts = 1

// marker is what the guest prints on its serial console once booted (qemu-ga up).
const marker = "VMLET-GUEST-READY"

// baseCmdline is the test guest's kernel command line (testguest.BaseCmdline).
const baseCmdline = "console=ttyS0 quiet panic=-1"

// LauncherSpec is g as a launcher Sync request (the launcher picks its own socket paths). It
// has no memory balloon, as a VMI with autoattachMemBalloon: false: the libvirt side runs
// <memballoon model='none'/> and bare QEMU none, so all three run the same devices.
func (g Guest) LauncherSpec() *pb.DomainSpec {
	return &pb.DomainSpec{
		Name:         g.Name,
		Machine:      g.Machine,
		Accel:        "tcg",
		TcgCacheMib:  int32(g.TCGCacheMiB),
		Cpu:          &pb.CPU{Model: "max", Sockets: 1, Cores: int32(g.VCPUs), Threads: 1},
		MemoryMib:    int32(g.MemoryMiB),
		Boot:         &pb.Boot{Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline},
		Serial:       true,
		Agent:        true,
		HotplugPorts: hotplugPorts,
	}
}

// QEMUSpec is g as the driver's spec, for bare QEMU's command line (qemu.BuildArgv).
func (g Guest) QEMUSpec() *qemu.Spec {
	return &qemu.Spec{
		Name:         g.Name,
		Machine:      g.Machine,
		Accel:        qemu.AccelTCG,
		TCGCacheMiB:  g.TCGCacheMiB,
		CPU:          qemu.CPU{Model: "max", Sockets: 1, Cores: g.VCPUs, Threads: 1},
		MemoryMiB:    g.MemoryMiB,
		Boot:         qemu.Boot{Kernel: g.Kernel, Initrd: g.Initrd, Cmdline: g.Cmdline},
		Serial:       &qemu.Serial{Socket: g.ConsoleSocket},
		Agent:        &qemu.Agent{Socket: g.AgentSocket},
		HotplugPorts: hotplugPorts,
	}
}

// withoutFreeze drops -S from a BuildArgv command line: bare QEMU starts the guest at once (the
// driver adds -S to cold-plug devices first, which this guest does not need).
func withoutFreeze(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a != "-S" {
			out = append(out, a)
		}
	}
	return out
}

// cmdline joins the base command line with extra flags.
func cmdline(extra ...string) string {
	return strings.Join(append([]string{baseCmdline}, extra...), " ")
}
