package evacuation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstancemigrations,verbs=get;list;watch;create

// Controller is the evacuation controller; its reconcile key is a Node's name.
type Controller struct {
	Client   client.Client
	Recorder events.EventRecorder
	// APIReader reads the ConfigMap and the migrations uncached (a migration created by the
	// previous pass must count, however far the cache lags); nil means Client.
	APIReader client.Reader
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
	// PDBs keeps a PodDisruptionBudget per VMI that must not be evicted (cluster mode, where a
	// kubelet evicts pods: PDB); local mode has no evictions.
	PDBs bool
}

// SetupWithManager registers the controller: Nodes, and the VMIs and migrations that change
// what their node's drain does.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("vmi-evacuation").
		For(&corev1.Node{}).
		Watches(&vmletv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(vmiNodes)).
		Watches(&vmletv1.VirtualMachineInstanceMigration{}, handler.EnqueueRequestsFromMapFunc(c.migrationNodes)).
		Complete(c)
}

// vmiNodes maps a VMI to the node it runs on and the one it is evacuated from.
func vmiNodes(_ context.Context, o client.Object) []reconcile.Request {
	vmi := o.(*vmletv1.VirtualMachineInstance)
	var out []reconcile.Request
	for _, n := range []string{vmi.Status.NodeName, vmi.Status.EvacuationNodeName} {
		if n != "" && (len(out) == 0 || out[0].Name != n) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: n}})
		}
	}
	return out
}

// migrationNodes maps a migration to its source node (an ended one frees a slot there) and the
// node it evacuates.
func (c *Controller) migrationNodes(_ context.Context, o client.Object) []reconcile.Request {
	m := o.(*vmletv1.VirtualMachineInstanceMigration)
	var out []reconcile.Request
	if ms := m.Status.MigrationState; ms != nil && ms.SourceNode != "" {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: ms.SourceNode}})
	}
	if n := m.Annotations[AnnotationEvacuation]; n != "" {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: n}})
	}
	return out
}

func (c *Controller) reader() client.Reader {
	if c.APIReader != nil {
		return c.APIReader
	}
	return c.Client
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Reconcile applies the drain (or its end) to the VMIs of one node.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := c.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var vl vmletv1.VirtualMachineInstanceList
	if err := c.Client.List(ctx, &vl); err != nil {
		return ctrl.Result{}, fmt.Errorf("list VMIs: %w", err)
	}
	in := Input{Node: node.Name, Drained: Drained(node.Spec.Taints), Cordoned: node.Spec.Unschedulable, Now: c.now()}
	var marked []vmletv1.VirtualMachineInstance // evacuated from here, now elsewhere
	for _, v := range vl.Items {
		switch {
		case v.Status.NodeName == node.Name:
			in.VMIs = append(in.VMIs, v)
		case v.Status.EvacuationNodeName == node.Name:
			marked = append(marked, v)
		}
	}
	evacuating := in.Drained || (in.Cordoned && slices.ContainsFunc(in.VMIs, func(v vmletv1.VirtualMachineInstance) bool { return Marked(&v, node.Name) }))
	if evacuating || (c.PDBs && len(in.VMIs) > 0) {
		var err error
		if in.Default, in.Config, err = config(ctx, c.reader()); err != nil {
			c.Recorder.Eventf(node, nil, corev1.EventTypeWarning, "InvalidConfiguration", "Evacuate", "%v", err)
			return ctrl.Result{}, err
		}
	}
	var errs []error
	if c.PDBs {
		for i := range in.VMIs {
			if err := c.syncPDB(ctx, &in.VMIs[i], in.Default); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if evacuating {
		var ml vmletv1.VirtualMachineInstanceMigrationList
		if err := c.reader().List(ctx, &ml); err != nil {
			return ctrl.Result{}, fmt.Errorf("list migrations: %w", err)
		}
		in.Migrations = ml.Items
	}
	var res ctrl.Result
	byName := map[string]*vmletv1.VirtualMachineInstance{}
	for i := range in.VMIs {
		byName[in.VMIs[i].Namespace+"/"+in.VMIs[i].Name] = &in.VMIs[i]
	}
	for _, d := range Plan(in) {
		vmi := byName[d.Namespace+"/"+d.Name]
		if err := c.apply(ctx, node.Name, vmi, d); err != nil {
			errs = append(errs, fmt.Errorf("vmi %s/%s: %w", d.Namespace, d.Name, err))
		}
		if d.RetryAfter > 0 && (res.RequeueAfter == 0 || d.RetryAfter < res.RequeueAfter) {
			res.RequeueAfter = d.RetryAfter
		}
	}
	for i := range marked {
		// It left (migrated): it is no longer being evacuated from here.
		if err := c.setStatus(ctx, &marked[i], func(v *vmletv1.VirtualMachineInstance) { v.Status.EvacuationNodeName = "" }); err != nil {
			errs = append(errs, err)
		}
	}
	return res, errors.Join(errs...)
}

// apply writes one decision: the VMI's evacuationNodeName and conditions, the migration, the
// Events.
func (c *Controller) apply(ctx context.Context, node string, vmi *vmletv1.VirtualMachineInstance, d Decision) error {
	if d.Action == Migrate {
		// The cache may not show yet that the vmi left (the previous evacuation migration just
		// moved it) or is migrating: a second migration then would wait for a target and, once
		// the node is uncordoned, move it back. Ask the API server.
		fresh := &vmletv1.VirtualMachineInstance{}
		if err := c.reader().Get(ctx, client.ObjectKeyFromObject(vmi), fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if ms := fresh.Status.MigrationState; fresh.Status.NodeName != node || (ms != nil && ms.MigrationUID != "" && !ms.Completed && !ms.Failed) {
			return nil // its change wakes this node's pass again
		}
		vmi = fresh
	}
	wasBlocked := meta.IsStatusConditionTrue(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceEvacuationBlocked)
	wasEvicted := meta.IsStatusConditionTrue(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceDisruptionTarget)
	err := c.setStatus(ctx, vmi, func(v *vmletv1.VirtualMachineInstance) {
		v.Status.EvacuationNodeName = ""
		if d.Action != None {
			v.Status.EvacuationNodeName = node
		}
		if d.Action == Block {
			vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceEvacuationBlocked, true, ReasonBlocked, d.Message)
		} else {
			meta.RemoveStatusCondition(&v.Status.Conditions, vmletv1.VirtualMachineInstanceEvacuationBlocked)
		}
		if d.Action == Shutdown {
			vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceDisruptionTarget, true, ReasonEvicted, d.Message)
		}
	})
	if err != nil {
		return err
	}
	switch {
	case d.Action == Block && !wasBlocked:
		c.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonBlocked, "Evacuate", "%s", d.Message)
	case d.Action == Shutdown && !wasEvicted:
		c.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, string(ReasonEvicted), "Evacuate", "%s", d.Message)
	case d.Action == Migrate:
		m := NewMigration(vmi, node)
		if err := c.Client.Create(ctx, m); err != nil {
			c.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, ReasonFailedCreate, "Evacuate", "Error creating a Migration: %v", err)
			return fmt.Errorf("create migration: %w", err)
		}
		c.Recorder.Eventf(vmi, m, corev1.EventTypeNormal, ReasonCreated, "Evacuate", "Created Migration %s: node %s is drained", m.Name, node)
	}
	return nil
}

// setStatus applies change to vmi's status and patches it when that changed something (an
// optimistic lock: a conflict is retried on a fresh copy).
func (c *Controller) setStatus(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, change func(*vmletv1.VirtualMachineInstance)) error {
	for try := 0; ; try++ {
		orig := vmi.DeepCopy()
		change(vmi)
		if equality.Semantic.DeepEqual(orig.Status, vmi.Status) {
			return nil
		}
		err := c.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) || try == 3 {
			if err != nil {
				return fmt.Errorf("patch vmi %s status: %w", vmi.Name, err)
			}
			return nil
		}
		if err := c.reader().Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
}
