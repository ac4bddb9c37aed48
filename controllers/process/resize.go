package process

import (
	"context"
	"fmt"

	"github.com/vmlet/vmlet/cpuweight"
)

// Resources are what a launcher is given after it started, when its VMI's vCPUs or memory
// change (CPU and memory hotplug).
type Resources struct {
	// CPUMilli is the new CPU request (Spec.CPUMilli).
	CPUMilli int64
	// MemoryBytes is the new memory the launcher needs (guest memory + overhead); a local
	// launcher's cgroup has no memory limit, so it is not applied here.
	MemoryBytes int64
}

// Resize gives a running launcher's VM the CPU weight of res.CPUMilli, as a pod resized to that
// CPU request would get. A no-op without CPU weights or without the VM's group (nothing was
// derived from the request then). Idempotent.
// Equivalent to: echo SHARES > <vm>/cpu.shares (v2: cpu.weight)
func (r *Runtime) Resize(_ context.Context, id string, res Resources) error {
	if err := validID(id); err != nil {
		return err
	}
	vm := r.cpuGroup(id)
	if vm == nil || !vm.Exists() {
		return nil
	}
	if err := vm.Create(cpuweight.PlanVM(res.CPUMilli)); err != nil {
		return fmt.Errorf("resize launcher %s: %w", id, err)
	}
	return nil
}
