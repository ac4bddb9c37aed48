package qemu

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/vmlet/vmlet/qemu/qmp"
)

// virtioMemPath is the virtio-mem device's QOM path (qom-get/qom-set).
const virtioMemPath = peripheralPrefix + devVirtioMem

const mib = 1 << 20

// MemoryStatus is the memory as QEMU reports it (the virtio-mem device's properties).
type MemoryStatus struct {
	BootBytes      int64 // -m size
	PluggedBytes   int64 // virtio-mem "size": what the guest has plugged now
	RequestedBytes int64 // virtio-mem "requested-size"
	MaxBytes       int64 // boot memory plus the region
	BlockBytes     int64
}

// MemorySizeChanged reports whether e is the MEMORY_DEVICE_SIZE_CHANGE of vmlet's virtio-mem
// device (the guest plugged or unplugged blocks). Pure.
func MemorySizeChanged(e qmp.Event) bool {
	if e.Name != "MEMORY_DEVICE_SIZE_CHANGE" {
		return false
	}
	var d struct {
		ID      string `json:"id"`
		QOMPath string `json:"qom-path"`
	}
	return json.Unmarshal(e.Data, &d) == nil && (d.ID == devVirtioMem || d.QOMPath == virtioMemPath)
}

// Memory returns the virtio-mem figures; ErrNotHotpluggable without memory hotplug.
//
// QMP: qom-get /machine/peripheral/vmem_0 size, requested-size.
func (vm *VM) Memory(ctx context.Context) (MemoryStatus, error) {
	m := vm.spec.MemoryHotplug
	if m == nil {
		return MemoryStatus{}, fmt.Errorf("memory: %w: started without memory hotplug", ErrNotHotpluggable)
	}
	st := MemoryStatus{BootBytes: int64(vm.spec.MemoryMiB) * mib, MaxBytes: int64(m.MaxMiB) * mib, BlockBytes: int64(m.blockMiB()) * mib}
	for prop, dst := range map[string]*int64{"size": &st.PluggedBytes, "requested-size": &st.RequestedBytes} {
		if err := vm.execute(ctx, "qom-get", map[string]any{"path": virtioMemPath, "property": prop}, dst); err != nil {
			return MemoryStatus{}, fmt.Errorf("memory %s: %w", prop, err)
		}
	}
	return st, nil
}

// SetMemory sets the virtio-mem requested size to requestedMiB (a multiple of the block size
// within the region, else a *SpecError). It returns at once: the guest plugs or unplugs
// blocks in its own time, and MEMORY_DEVICE_SIZE_CHANGE (MemorySizeChanged) reports progress.
//
// QMP: qom-set /machine/peripheral/vmem_0 requested-size.
func (vm *VM) SetMemory(ctx context.Context, requestedMiB int) (MemoryStatus, error) {
	m := vm.spec.MemoryHotplug
	if m == nil {
		return MemoryStatus{}, fmt.Errorf("set memory: %w: started without memory hotplug", ErrNotHotpluggable)
	}
	if err := checkRequestedMiB("requestedMiB", requestedMiB, m.regionMiB(vm.spec.MemoryMiB), m.blockMiB()); err != nil {
		return MemoryStatus{}, err
	}
	vm.devMu.Lock()
	defer vm.devMu.Unlock()
	args := map[string]any{"path": virtioMemPath, "property": "requested-size", "value": int64(requestedMiB) * mib}
	if err := vm.execute(ctx, "qom-set", args, nil); err != nil {
		return MemoryStatus{}, fmt.Errorf("set memory: %w", err)
	}
	vm.mu.Lock()
	vm.memRequestedMiB = requestedMiB
	vm.mu.Unlock()
	return vm.Memory(ctx)
}
