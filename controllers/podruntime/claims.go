package podruntime

import (
	"context"
	"fmt"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// Claims returns the claims VMI id's launcher pod mounts (launcherpod.AnnotClaims), where the
// pod mounts them: at their node paths, so the storage the agent prepares on the node is what
// QEMU opens in the container. controllers.ErrClaimsUnknown while the pod is not in the cache.
func (r *Runtime) Claims(ctx context.Context, id string) ([]launcherpod.Claim, error) {
	pod, err := r.pod(ctx, id)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("launcher of %s: %w", id, controllers.ErrClaimsUnknown)
	}
	return launcherpod.PodClaims(pod)
}
