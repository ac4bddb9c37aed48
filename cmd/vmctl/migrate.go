package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// errMigrationFailed: migrate --wait saw the migration end Failed (exit status 5).
var errMigrationFailed = errors.New("migration failed")

var migrationResource = vmletv1.GroupVersion.WithResource("virtualmachineinstancemigrations")

type migrateOptions struct {
	kube     kubeFlags
	wait     bool
	deadline time.Duration
}

func (t *vmTarget) migrations() (dynamic.ResourceInterface, error) {
	dyn, err := dynamic.NewForConfig(t.cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return dyn.Resource(migrationResource).Namespace(t.vmi.Namespace), nil
}

func toMigration(obj runtime.Object) (*vmletv1.VirtualMachineInstanceMigration, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", obj)
	}
	var m vmletv1.VirtualMachineInstanceMigration
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return nil, fmt.Errorf("migration %s: %w", u.GetName(), err)
	}
	return &m, nil
}

// ended reports whether a migration is over (Succeeded or Failed).
func ended(m *vmletv1.VirtualMachineInstanceMigration) bool {
	return m.Status.Phase == vmletv1.MigrationSucceeded || m.Status.Phase == vmletv1.MigrationFailed
}

// migrate creates a VirtualMachineInstanceMigration for the VMI (generateName NAME-migration-,
// as virtctl migrate) and, with --wait, waits for its end. Equivalent to kubectl create -f of
// {kind: VirtualMachineInstanceMigration, spec: {vmiName: NAME}}.
func (c *cli) migrate(ctx context.Context, t *vmTarget, o *migrateOptions) error {
	if o.deadline < 0 {
		return usageError("--deadline must be 0 or more")
	}
	migs, err := t.migrations()
	if err != nil {
		return err
	}
	vmis, err := t.vmis()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if _, err := vmis.Get(cctx, t.vmi.Name, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("vmi %s: %w", t.vmi, err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vmletv1.GroupVersion.String(),
		"kind":       "VirtualMachineInstanceMigration",
		"metadata":   map[string]any{"generateName": t.vmi.Name + "-migration-", "namespace": t.vmi.Namespace},
		"spec":       map[string]any{"vmiName": t.vmi.Name},
	}}
	created, err := migs.Create(cctx, obj, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create migration of vmi %s: %w", t.vmi, err)
	}
	name := created.GetName()
	fmt.Fprintf(c.stdout, "virtualmachineinstancemigration/%s created: migrating vmi %s\n", name, t.vmi.Name)
	if !o.wait {
		return nil
	}
	wctx, wcancel := ctx, context.CancelFunc(func() {})
	if o.deadline > 0 {
		wctx, wcancel = context.WithTimeout(ctx, o.deadline)
	}
	defer wcancel()
	phase := vmletv1.MigrationPhaseUnset
	var last *vmletv1.VirtualMachineInstanceMigration
	_, err = watchtools.UntilWithSync(wctx, listWatch(migs, name), &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			return false, fmt.Errorf("migration %s was deleted before it ended", name)
		}
		m, err := toMigration(ev.Object)
		if err != nil {
			return false, err
		}
		last = m
		if m.Status.Phase != phase {
			phase = m.Status.Phase
			fmt.Fprintf(c.stdout, "virtualmachineinstancemigration/%s: %s\n", name, phase)
		}
		return ended(m), nil
	})
	switch {
	case err == nil && last.Status.Phase == vmletv1.MigrationFailed:
		why := ""
		if ms := last.Status.MigrationState; ms != nil && ms.FailureReason != "" {
			why = ": " + ms.FailureReason
		}
		return fmt.Errorf("%w: %s%s", errMigrationFailed, name, why)
	case err == nil:
		if ms := last.Status.MigrationState; ms != nil && ms.TargetNode != "" {
			fmt.Fprintf(c.stdout, "vmi/%s migrated from node %s to node %s\n", t.vmi.Name, ms.SourceNode, ms.TargetNode)
		}
		return nil
	case errors.Is(err, watchtools.ErrWatchClosed), wctx.Err() != nil && ctx.Err() == nil:
		return blockedError(fmt.Sprintf("migration %s not ended after %s (phase %q); it goes on: vmctl migrate-cancel %s stops it", name, o.deadline, phase, t.vmi.Name))
	}
	return fmt.Errorf("wait for migration %s: %w", name, err)
}

// listWatch lists and watches the one migration called name.
func listWatch(migs dynamic.ResourceInterface, name string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return migs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return migs.Watch(ctx, o)
		},
	}
}

// migrateCancel deletes the VMI's migrations that have not ended: the migration controller
// aborts one that runs (the guest stays where it was). With --wait it waits until they are
// gone (the abort ended).
func (c *cli) migrateCancel(ctx context.Context, t *vmTarget, o *migrateOptions) error {
	migs, err := t.migrations()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	l, err := migs.List(cctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list migrations: %w", err)
	}
	var active []*vmletv1.VirtualMachineInstanceMigration
	for i := range l.Items {
		m, err := toMigration(&l.Items[i])
		if err != nil {
			return err
		}
		if m.Spec.VMIName == t.vmi.Name && !ended(m) && m.DeletionTimestamp.IsZero() {
			active = append(active, m)
		}
	}
	if len(active) == 0 {
		return fmt.Errorf("%w: no migration of vmi %s to cancel (none that has not ended)", errNotFound, t.vmi)
	}
	slices.SortFunc(active, func(a, b *vmletv1.VirtualMachineInstanceMigration) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range active {
		phase := string(m.Status.Phase)
		if phase == "" {
			phase = "not started"
		}
		pre := metav1.Preconditions{UID: &m.UID}
		if err := migs.Delete(cctx, m.Name, metav1.DeleteOptions{Preconditions: &pre}); err != nil {
			return fmt.Errorf("delete migration %s: %w", m.Name, err)
		}
		fmt.Fprintf(c.stdout, "virtualmachineinstancemigration/%s deleted (was %s): migration of vmi %s cancelled\n", m.Name, phase, t.vmi.Name)
	}
	if !o.wait {
		return nil
	}
	wctx, wcancel := ctx, context.CancelFunc(func() {})
	if o.deadline > 0 {
		wctx, wcancel = context.WithTimeout(ctx, o.deadline)
	}
	defer wcancel()
	for _, m := range active {
		gone := func(store cache.Store) (bool, error) {
			_, exists, err := store.GetByKey(m.Namespace + "/" + m.Name)
			return !exists, err
		}
		_, err := watchtools.UntilWithSync(wctx, listWatch(migs, m.Name), &unstructured.Unstructured{}, gone,
			func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
		if wctx.Err() != nil && ctx.Err() == nil {
			return blockedError(fmt.Sprintf("migration %s still there after %s (its abort has not ended)", m.Name, o.deadline))
		}
		if err != nil {
			return fmt.Errorf("wait for migration %s to go: %w", m.Name, err)
		}
		fmt.Fprintf(c.stdout, "virtualmachineinstancemigration/%s gone\n", m.Name)
	}
	return nil
}
