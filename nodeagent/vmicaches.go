package nodeagent

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
)

// MigrationCaches are the caches of the VMIs that migrate to or from node: the migration
// controller labels a VMI with its source and target nodes (migration.LabelSourceNode,
// LabelTargetNode) when it hands a migration to them. A node agent whose manager caches only
// the VMIs with status.nodeName = its node (cluster mode) needs them: the target works on a
// VMI that is not on its node yet, the source cleans up after the VMI left it. Like KubeVirt's
// virt-handler, which watches its node's VMIs and its migration targets separately. Add them to
// the manager (they are Runnables), read through UnionVMIs, and watch them (Config.VMICaches).
// base gives the scheme, and the HTTP client and REST mapper to share with the manager's cache.
func MigrationCaches(cfg *rest.Config, base cache.Options, node string) ([]cache.Cache, error) {
	var cs []cache.Cache
	for _, key := range []string{migration.LabelTargetNode, migration.LabelSourceNode} {
		o := base
		o.ByObject = map[client.Object]cache.ByObject{
			&vmletv1.VirtualMachineInstance{}: {Label: labels.SelectorFromSet(labels.Set{key: node})},
		}
		c, err := cache.New(cfg, o)
		if err != nil {
			return nil, fmt.Errorf("cache of VMIs labelled %s=%s: %w", key, node, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// UnionVMIs reads VMIs from main and then from extra (the first that has one wins; List merges
// them, each VMI once), everything else from main alone.
func UnionVMIs[R client.Reader](main client.Reader, extra []R) client.Reader {
	u := unionVMIs{main: main}
	for _, r := range extra {
		u.extra = append(u.extra, r)
	}
	return u
}

type unionVMIs struct {
	main  client.Reader
	extra []client.Reader
}

func (u unionVMIs) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	err := u.main.Get(ctx, key, obj, opts...)
	if _, ok := obj.(*vmletv1.VirtualMachineInstance); !ok || !apierrors.IsNotFound(err) {
		return err
	}
	for _, c := range u.extra {
		if xerr := c.Get(ctx, key, obj, opts...); !apierrors.IsNotFound(xerr) {
			return xerr
		}
	}
	return err
}

func (u unionVMIs) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := u.main.List(ctx, list, opts...); err != nil {
		return err
	}
	l, ok := list.(*vmletv1.VirtualMachineInstanceList)
	if !ok {
		return nil
	}
	seen := map[client.ObjectKey]bool{}
	for i := range l.Items {
		seen[client.ObjectKeyFromObject(&l.Items[i])] = true
	}
	for _, c := range u.extra {
		var more vmletv1.VirtualMachineInstanceList
		if err := c.List(ctx, &more, opts...); err != nil {
			return err
		}
		for i := range more.Items {
			if k := client.ObjectKeyFromObject(&more.Items[i]); !seen[k] {
				seen[k] = true
				l.Items = append(l.Items, more.Items[i])
			}
		}
	}
	return nil
}
