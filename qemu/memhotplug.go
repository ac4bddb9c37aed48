package qemu

import (
	"fmt"
	"strconv"
)

// MemoryHotplug is a virtio-mem region on top of the boot memory (Spec.MemoryMiB): QEMU gets
//
//	-m size=BOOTM,maxmem=MAXM
//	-object memory-backend-ram,id=vmem_mem,size=(MAX-BOOT)M
//	-device virtio-mem-pci,id=vmem_0,memdev=vmem_mem,requested-size=RM,block-size=BM,bus=pcie.0,addr=0x9
//
// The device sits at a fixed pcie.0 address (like the balloon), so it moves neither the hotplug
// root ports nor the migration layout. QEMU 7.2 needs no -m slots for virtio-mem. The guest
// plugs and unplugs blocks itself when requested-size changes (SetMemory); a Linux guest needs
// the virtio_mem driver, and memory onlined movable to give it back. QEMU itself requires only
// the region (MaxMiB - MemoryMiB) to be a multiple of the block size (checked by Validate; any
// boot size works, measured with QEMU 7.2); a Linux guest can use the region's last partial
// 128 MiB memory block only if the region is a multiple of 128 MiB (the region starts at a
// 1 GiB-aligned address above 4 GiB).
type MemoryHotplug struct {
	// MaxMiB is the boot memory plus the region: the most the guest can have.
	MaxMiB int
	// RequestedMiB is the requested-size at start (0 for a fresh VM; a migration target gets
	// the source's current value, see MigrationSpec).
	RequestedMiB int
	// BlockMiB is the virtio-mem block size, a power of two of at least 2 (QEMU warns below
	// its x86 default, the transparent huge page size); 0 means DefaultMemoryBlockMiB.
	BlockMiB int
}

// DefaultMemoryBlockMiB is the virtio-mem block size when MemoryHotplug.BlockMiB is 0 (QEMU's
// default on x86: the transparent huge page size).
const DefaultMemoryBlockMiB = 2

// maxMemoryBlockMiB bounds MemoryHotplug.BlockMiB (a Linux guest's memory block on x86 is
// 128 MiB; larger virtio-mem blocks force the driver's big-block mode).
const maxMemoryBlockMiB = 1024

// QEMU names of the virtio-mem device and its memory backend, and its fixed address.
const (
	devVirtioMem  = "vmem_0"
	objVirtioMem  = "vmem_mem"
	addrVirtioMem = "0x9"
)

func (m MemoryHotplug) blockMiB() int {
	if m.BlockMiB == 0 {
		return DefaultMemoryBlockMiB
	}
	return m.BlockMiB
}

// regionMiB is the size of the virtio-mem region.
func (m MemoryHotplug) regionMiB(bootMiB int) int { return m.MaxMiB - bootMiB }

// validateMemoryHotplug checks the region against the boot memory.
func (s *Spec) validateMemoryHotplug() error {
	m := s.MemoryHotplug
	if m == nil {
		return nil
	}
	b := m.blockMiB()
	switch {
	case b < DefaultMemoryBlockMiB || b > maxMemoryBlockMiB || b&(b-1) != 0:
		return specErr("memoryHotplug.blockMiB", fmt.Sprint(m.BlockMiB),
			fmt.Sprintf("must be a power of two, %d-%d", DefaultMemoryBlockMiB, maxMemoryBlockMiB))
	case m.MaxMiB <= s.MemoryMiB || m.MaxMiB > MaxMemoryMiB:
		return specErr("memoryHotplug.maxMiB", fmt.Sprint(m.MaxMiB), fmt.Sprintf("must be more than memoryMiB (%d) and at most %d", s.MemoryMiB, MaxMemoryMiB))
	case m.regionMiB(s.MemoryMiB)%b != 0:
		return specErr("memoryHotplug.maxMiB", fmt.Sprint(m.MaxMiB),
			fmt.Sprintf("maxMiB - memoryMiB (%d) must be a multiple of the block size (%d MiB)", m.regionMiB(s.MemoryMiB), b))
	}
	return checkRequestedMiB("memoryHotplug.requestedMiB", m.RequestedMiB, m.regionMiB(s.MemoryMiB), b)
}

// checkRequestedMiB checks a virtio-mem requested size against the region and block size.
func checkRequestedMiB(field string, req, regionMiB, blockMiB int) error {
	switch {
	case req < 0 || req > regionMiB:
		return specErr(field, fmt.Sprint(req), fmt.Sprintf("must be 0-%d (the hotplug region)", regionMiB))
	case req%blockMiB != 0:
		return specErr(field, fmt.Sprint(req), fmt.Sprintf("must be a multiple of the block size (%d MiB)", blockMiB))
	}
	return nil
}

// memoryArgs appends -m and, with memory hotplug, the virtio-mem backend and device.
func (b *argv) memoryArgs(s *Spec) {
	m := s.MemoryHotplug
	if m == nil {
		b.add("-m", strconv.Itoa(s.MemoryMiB)+"M")
		return
	}
	mib := func(n int) string { return strconv.Itoa(n) + "M" }
	b.opt("-m", "size", mib(s.MemoryMiB), "maxmem", mib(m.MaxMiB))
	b.opt("-object", "", "memory-backend-ram", "id", objVirtioMem, "size", mib(m.regionMiB(s.MemoryMiB)))
	b.opt("-device", "", "virtio-mem-pci", "id", devVirtioMem, "memdev", objVirtioMem,
		"requested-size", mib(m.RequestedMiB), "block-size", mib(m.blockMiB()), "bus", "pcie.0", "addr", addrVirtioMem)
}
