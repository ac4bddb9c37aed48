package process

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmlet/vmlet/cpuweight"
)

// ErrResizing says a launcher's resize was asked for and not applied yet (a launcher pod's
// kubelet has not, or deferred it): look again later, apply nothing that needs it meanwhile.
var ErrResizing = errors.New("launcher resize in progress")

// Resources are what a launcher is given after it started, when its VMI's vCPUs or memory
// change (CPU and memory hotplug).
type Resources struct {
	// CPUMilli is the new CPU request (Spec.CPUMilli).
	CPUMilli int64
	// Pod are the launcher pod container's resources for the new vCPUs and memory
	// (launcherpod.Resources): what a pod runtime resizes to. A local launcher's cgroup has no
	// memory limit, so the process runtime reads only CPUMilli.
	Pod corev1.ResourceRequirements
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
