package qemu

// MemoryHotplug is a virtio-mem region on top of the boot memory (Spec.MemoryMiB).
// (Placeholder of the cpumem-launcher branch's type, same fields: that branch owns this file.)
type MemoryHotplug struct {
	// MaxMiB is the boot memory plus the region: the most the guest can have.
	MaxMiB int
	// RequestedMiB is the requested-size at start (0 for a fresh VM; a migration target gets
	// the source's current value, see MigrationSpec).
	RequestedMiB int
	// BlockMiB is the virtio-mem block size, a power of two; 0 means DefaultMemoryBlockMiB.
	BlockMiB int
}

// DefaultMemoryBlockMiB is the virtio-mem block size when MemoryHotplug.BlockMiB is 0 (QEMU's
// default on x86: the transparent huge page size).
const DefaultMemoryBlockMiB = 2
