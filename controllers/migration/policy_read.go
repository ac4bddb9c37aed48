package migration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// policy returns the MigrationPolicy that applies to vmi's migration (MatchPolicy over all
// policies, with the labels of the vmi and of its namespace), nil if none matches. Both are
// read from the API server when the migration is scheduled, as KubeVirt does: a policy created
// or changed later applies to the next migration. Without the MigrationPolicy CRD there are no
// policies.
func (c *Controller) policy(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (*migrationsv1.MigrationPolicy, error) {
	var l migrationsv1.MigrationPolicyList
	if err := c.reader().List(ctx, &l); meta.IsNoMatchError(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("list migration policies: %w", err)
	}
	if len(l.Items) == 0 {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := c.reader().Get(ctx, types.NamespacedName{Name: vmi.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("read namespace %s: %w", vmi.Namespace, err)
	}
	p := MatchPolicy(l.Items, vmi.Labels, ns.Labels)
	if p == nil {
		return nil, nil
	}
	return p.DeepCopy(), nil
}
