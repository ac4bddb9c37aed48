package controllers

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// patchFinalizer adds (add=true) or removes the node agent's finalizer with a JSON merge patch of
// metadata.finalizers alone, guarded by the VMI's resourceVersion.
//
// Never an Update: an Update resends the whole object as the Go types serialize it (e.g.
// `resources: {}` for a VMI that never wrote it), which the spec's immutability rules refuse,
// and a VMI then never starts. Equivalent to:
//
//	kubectl patch vmi NAME --type merge -p '{"metadata":{"finalizers":[...],"resourceVersion":"RV"}}'
func patchFinalizer(ctx context.Context, c client.Client, vmi *vmletv1.VirtualMachineInstance, add bool) error {
	orig := vmi.DeepCopy()
	if add && !controllerutil.AddFinalizer(vmi, Finalizer) || !add && !controllerutil.RemoveFinalizer(vmi, Finalizer) {
		return nil // already as wanted
	}
	if err := c.Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if add {
			return fmt.Errorf("add finalizer: %w", err)
		}
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return nil
}
