package translate

import (
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// CPU and memory hotplug (spec.domain.cpu.maxSockets, spec.domain.memory.maxGuest). The domain
// a VMI starts with is its boot topology: the sockets and the memory it booted with
// (status.launcher.socketsAtBoot, status.memory.guestAtBoot once the node agent wrote them;
// the spec's before), so that the same VMI translates to the same domain whatever its spec
// asks now: the difference is plugged into the running guest (SetCPUs, SetMemory), never a
// different domain. Without a maximum the domain has no hotplug at all (no -smp maxcpus
// beyond sockets, no virtio-mem device): the machine of a VMI that does not ask for it is the
// one it had before vmlet knew hotplug.

// BootSockets is the number of sockets the VMI's domain starts with.
func BootSockets(vmi *vmletv1.VirtualMachineInstance) int {
	if l := vmi.Status.Launcher; l != nil && l.SocketsAtBoot > 0 && HasCPUHotplug(vmi) {
		return int(l.SocketsAtBoot)
	}
	return WantedSockets(vmi)
}

// WantedSockets is the number of sockets the spec asks for now (1 when unset).
func WantedSockets(vmi *vmletv1.VirtualMachineInstance) int {
	if c := vmi.Spec.Domain.CPU; c != nil && c.Sockets > 0 {
		return int(c.Sockets)
	}
	return 1
}

// HasCPUHotplug reports whether the VMI asked for CPU hotplug (spec.domain.cpu.maxSockets).
func HasCPUHotplug(vmi *vmletv1.VirtualMachineInstance) bool {
	c := vmi.Spec.Domain.CPU
	return c != nil && c.MaxSockets > 0
}

// HasMemoryHotplug reports whether the VMI asked for memory hotplug
// (spec.domain.memory.maxGuest with spec.domain.memory.guest, as the API requires).
func HasMemoryHotplug(vmi *vmletv1.VirtualMachineInstance) bool {
	m := vmi.Spec.Domain.Memory
	return m != nil && m.MaxGuest != nil && m.Guest != nil
}

// BootMemoryMiB is the memory the VMI's domain starts with: status.memory.guestAtBoot once
// known, else the spec's guest memory (specMiB).
func BootMemoryMiB(vmi *vmletv1.VirtualMachineInstance, specMiB int) int {
	if m := vmi.Status.Memory; HasMemoryHotplug(vmi) && m != nil && m.GuestAtBoot != nil && m.GuestAtBoot.Value() >= 1<<20 {
		return mib(m.GuestAtBoot.Value())
	}
	return specMiB
}

// MemoryRequestMiB is what the virtio-mem device must hold for the guest to have the spec's
// guest memory: guest - boot, rounded up to whole blocks, within [0, the region].
func MemoryRequestMiB(vmi *vmletv1.VirtualMachineInstance, h *qemu.MemoryHotplug, bootMiB int) int {
	if h == nil || vmi.Spec.Domain.Memory == nil || vmi.Spec.Domain.Memory.Guest == nil {
		return 0
	}
	block := blockMiB(h)
	want := mib(vmi.Spec.Domain.Memory.Guest.Value()) - bootMiB
	want = (want + block - 1) / block * block
	return min(max(want, 0), h.MaxMiB-bootMiB)
}

// PinBoot sets s's boot sockets and memory (and the virtio-mem region, which starts at the
// boot memory) from the VMI's recorded boot values: what a domain that already runs was
// started with, whatever the spec asks now. The node agent calls it once it recorded them
// from the running domain (an earlier status write may have been lost).
func PinBoot(vmi *vmletv1.VirtualMachineInstance, s *qemu.Spec) {
	cpuHotplug(vmi, &s.CPU)
	if HasMemoryHotplug(vmi) {
		s.MemoryMiB = BootMemoryMiB(vmi, s.MemoryMiB)
		s.MemoryHotplug = memoryHotplug(vmi, s.MemoryMiB)
	}
}

// cpuHotplug sets the domain's boot sockets and maximum when the VMI asked for CPU hotplug.
func cpuHotplug(vmi *vmletv1.VirtualMachineInstance, c *qemu.CPU) {
	if !HasCPUHotplug(vmi) {
		return
	}
	c.Sockets = BootSockets(vmi)
	c.MaxSockets = max(int(vmi.Spec.Domain.CPU.MaxSockets), c.Sockets)
}

// memoryHotplug is the domain's virtio-mem region when the VMI asked for memory hotplug: from
// the boot memory up to maxGuest, in whole blocks (nil when maxGuest leaves no block). It starts
// empty (RequestedMiB 0): the agent asks for the rest once the guest runs.
func memoryHotplug(vmi *vmletv1.VirtualMachineInstance, bootMiB int) *qemu.MemoryHotplug {
	if !HasMemoryHotplug(vmi) {
		return nil
	}
	h := &qemu.MemoryHotplug{BlockMiB: qemu.DefaultMemoryBlockMiB}
	region := (int(vmi.Spec.Domain.Memory.MaxGuest.Value()>>20) - bootMiB) / h.BlockMiB * h.BlockMiB
	if region <= 0 {
		return nil
	}
	h.MaxMiB = bootMiB + region
	return h
}

func blockMiB(h *qemu.MemoryHotplug) int {
	if h.BlockMiB > 0 {
		return h.BlockMiB
	}
	return qemu.DefaultMemoryBlockMiB
}

func mib(b int64) int { return int((b + 1<<20 - 1) >> 20) }
