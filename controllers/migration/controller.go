package migration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// Finalizer keeps a migration until an abort its deletion asked for has ended.
const Finalizer = "vmlet.dev/migration-abort"

// vmiNameIndex indexes migrations by spec.vmiName.
const vmiNameIndex = "spec.vmiName"

// KeepFinished is how many ended migrations of one vmi are kept (the newest); older ones are
// deleted, as KubeVirt's garbage collection does.
const KeepFinished = 5

// AbortSettle is how long a deleted migration that ended keeps its finalizer while its
// abortStatus still says Aborting: the source's agent says how the abort went.
const AbortSettle = 30 * time.Second

// SchedulingTimeout fails a migration whose target cannot be placed for this long (KubeVirt's
// unschedulable-target-pod timeout).
const SchedulingTimeout = 5 * time.Minute

// Picker places a migration's target (never on the vmi's current node); an error says why no
// node takes it yet (the scheduler's message). Controller.schedule calls it on every pass until
// it returns a node, so it must be idempotent.
type Picker func(ctx context.Context, req TargetRequest) (Target, error)

// TargetRequest is what a Picker places a target for.
type TargetRequest struct {
	Migration *vmletv1.VirtualMachineInstanceMigration
	VMI       *vmletv1.VirtualMachineInstance
	// Config is the configuration the migration runs with (the cluster's, with the matching
	// MigrationPolicy's fields over it).
	Config vmletv1.MigrationConfiguration
}

// Target is where a migration's target runs.
type Target struct {
	Node string
	// Pod is the target's launcher pod (migrationState.targetPod): cluster mode's; empty in
	// local mode, where the target's agent names its launcher.
	Pod string
	// SourcePod is the vmi's launcher pod the picker found on the source node
	// (migrationState.sourcePod); empty means the one the vmi's status names.
	SourcePod string
}

// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstancemigrations,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances/status,verbs=get;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstancemigrations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstancemigrations/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=migrations.vmlet.dev,resources=migrationpolicies,verbs=get;list;watch

// Controller is the VirtualMachineInstanceMigration controller.
type Controller struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Pick places migration targets: local mode picks among its nodes
	// (controllers.LocalScheduler.PickTarget), cluster mode makes target launcher pods
	// (TargetPods.Pick); nil fails every migration with NoTargetNode.
	Pick Picker
	// Pods is set in cluster mode, where Pick is Pods.Pick: the controller then watches
	// target launcher pods (a bind wakes the migration waiting for it) and deletes the target
	// pod of a migration that failed, was aborted or deleted (TargetPods.Release).
	Pods *TargetPods
	// APIReader reads the configuration ConfigMap, the MigrationPolicies and the vmi's
	// Namespace (uncached: read once when a migration is scheduled, not watched); nil means
	// Client.
	APIReader client.Reader
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// SetupWithManager registers the controller: it watches migrations and the vmis they name.
func (c *Controller) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &vmletv1.VirtualMachineInstanceMigration{}, vmiNameIndex,
		func(o client.Object) []string {
			return []string{o.(*vmletv1.VirtualMachineInstanceMigration).Spec.VMIName}
		}); err != nil {
		return fmt.Errorf("index migrations by vmi: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("vmi-migration").
		For(&vmletv1.VirtualMachineInstanceMigration{}).
		Watches(&vmletv1.VirtualMachineInstance{}, handler.EnqueueRequestsFromMapFunc(c.forVMI))
	if c.Pods != nil {
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(c.forTargetPod))
	}
	return b.Complete(c)
}

// forVMI maps a vmi to its migrations.
func (c *Controller) forVMI(ctx context.Context, o client.Object) []reconcile.Request {
	var l vmletv1.VirtualMachineInstanceMigrationList
	if err := c.Client.List(ctx, &l, client.InNamespace(o.GetNamespace()), client.MatchingFields{vmiNameIndex: o.GetName()}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(l.Items))
	for _, m := range l.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}})
	}
	return out
}

func (c *Controller) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Controller) reader() client.Reader {
	if c.APIReader != nil {
		return c.APIReader
	}
	return c.Client
}

// Reconcile moves one migration along.
func (c *Controller) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m := &vmletv1.VirtualMachineInstanceMigration{}
	if err := c.Client.Get(ctx, req.NamespacedName, m); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Spec.VMIName}, vmi); apierrors.IsNotFound(err) {
		vmi = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if !m.DeletionTimestamp.IsZero() {
		return c.abort(ctx, m, vmi)
	}
	if !Final(m.Status.Phase) && controllerutil.AddFinalizer(m, Finalizer) {
		if err := c.Client.Update(ctx, m); err != nil {
			return ctrl.Result{}, err
		}
	}
	before := m.Status.DeepCopy()
	res, err := c.step(ctx, m, vmi)
	if !equality.Semantic.DeepEqual(before, &m.Status) {
		if uerr := c.Client.Status().Update(ctx, m); uerr != nil {
			if apierrors.IsConflict(uerr) {
				return ctrl.Result{RequeueAfter: time.Millisecond}, nil
			}
			return ctrl.Result{}, errors.Join(err, uerr)
		}
		if Final(m.Status.Phase) && !Final(before.Phase) {
			c.ended(m, vmi)
			if err := c.collect(ctx, m); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	return res, err
}

// step is one pass over a migration that is not being deleted.
func (c *Controller) step(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	switch m.Status.Phase {
	case vmletv1.MigrationSucceeded, vmletv1.MigrationFailed:
		if vmi != nil && vmi.Status.MigrationState != nil && vmi.Status.MigrationState.MigrationUID == m.UID {
			m.Status.MigrationState = vmi.Status.MigrationState.DeepCopy() // the nodes' last word
		}
		if m.Status.Phase == vmletv1.MigrationFailed {
			if err := c.release(ctx, m, vmi); err != nil {
				return ctrl.Result{}, err
			}
		}
		if controllerutil.RemoveFinalizer(m, Finalizer) {
			return ctrl.Result{}, c.Client.Update(ctx, m)
		}
		return ctrl.Result{}, nil
	case vmletv1.MigrationPhaseUnset:
		c.advance(m, vmletv1.MigrationPending)
		fallthrough
	case vmletv1.MigrationPending, vmletv1.MigrationScheduling:
		if ms := handedOver(m, vmi); ms != nil {
			// An earlier pass handed it to the nodes, then lost its own status write (a
			// conflict): the vmi carrying it is not another migration in flight.
			setCondition(m, "TargetScheduled", true, "Scheduled", "target node "+ms.TargetNode)
			m.Status.MigrationState = ms.DeepCopy()
			c.advance(m, vmletv1.MigrationScheduled)
			return ctrl.Result{}, nil
		}
		if m.Status.Phase == vmletv1.MigrationScheduling {
			return c.schedule(ctx, m, vmi)
		}
		return c.admit(ctx, m, vmi)
	}
	return c.follow(ctx, m, vmi)
}

// handedOver is the vmi's migrationState when it already carries migration m (schedule
// patched it in), nil otherwise.
func handedOver(m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) *vmletv1.VirtualMachineInstanceMigrationState {
	if vmi == nil || vmi.Status.MigrationState == nil || vmi.Status.MigrationState.MigrationUID != m.UID {
		return nil
	}
	return vmi.Status.MigrationState
}

// admit starts a pending migration when the vmi can migrate and a slot is free.
func (c *Controller) admit(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	all, err := c.migrations(ctx, "")
	if err != nil {
		return ctrl.Result{}, err
	}
	var others []string
	running, fromNode := 0, 0
	for _, o := range all {
		if o.UID == m.UID || !Active(o.Status.Phase) {
			continue
		}
		running++
		if o.Namespace == m.Namespace && o.Spec.VMIName == m.Spec.VMIName {
			others = append(others, o.Name)
		}
		if vmi != nil && o.Status.MigrationState != nil && o.Status.MigrationState.SourceNode == vmi.Status.NodeName {
			fromNode++
		}
	}
	if r := AdmitEvacuation(m, vmi); r.Reason != "" {
		c.fail(m, r.Reason, r.Message)
		return ctrl.Result{}, nil
	}
	if r := Admit(vmi, others); r.Reason != "" {
		c.fail(m, r.Reason, r.Message)
		return ctrl.Result{}, nil
	}
	cfg, err := c.config(ctx)
	if err != nil {
		c.fail(m, ReasonBadConfig, err.Error())
		return ctrl.Result{}, nil
	}
	if ok, why := Slots(cfg, running, fromNode); !ok {
		setCondition(m, "Throttled", true, "WaitingForSlot", why)
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil // other migrations' ends also wake it (their vmis change)
	}
	setCondition(m, "Throttled", false, "SlotFree", "")
	c.advance(m, vmletv1.MigrationScheduling)
	return c.schedule(ctx, m, vmi)
}

// schedule picks the target node and hands the migration to the node agents through the vmi's
// migrationState.
func (c *Controller) schedule(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	if r := AdmitEvacuation(m, vmi); r.Reason != "" {
		c.fail(m, r.Reason, r.Message)
		return ctrl.Result{}, nil
	}
	if r := Admit(vmi, nil); r.Reason != "" {
		c.fail(m, r.Reason, r.Message)
		return ctrl.Result{}, nil
	}
	if c.Pick == nil {
		c.fail(m, ReasonNoTarget, "this controller was started without a way to place migration targets")
		return ctrl.Result{}, nil
	}
	cfg, err := c.config(ctx)
	if err != nil {
		c.fail(m, ReasonBadConfig, err.Error())
		return ctrl.Result{}, nil
	}
	pol, err := c.policy(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	var policyName *string
	if pol != nil {
		cfg, policyName = ApplyPolicy(cfg, &pol.Spec), &pol.Name
	}
	t, err := c.Pick(ctx, TargetRequest{Migration: m, VMI: vmi, Config: cfg})
	if errors.Is(err, ErrTargetPodEnded) {
		c.fail(m, ReasonMigrationFailed, err.Error())
		return ctrl.Result{}, nil
	}
	if err != nil {
		since := phaseTime(m, vmletv1.MigrationScheduling)
		if c.now().Sub(since) >= SchedulingTimeout {
			c.fail(m, ReasonTargetTimeout, fmt.Sprintf("no node could take the target for %s: %v", SchedulingTimeout, err))
			return ctrl.Result{}, nil
		}
		setCondition(m, "TargetScheduled", false, ReasonNoTarget, err.Error())
		return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
	}
	target := t.Node
	noPostCopy, err := c.effectivePostCopy(ctx, &cfg, target)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := c.label(ctx, vmi, target); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	sourcePod := t.SourcePod
	if sourcePod == "" {
		sourcePod = launcherPod(vmi)
	}
	orig := vmi.DeepCopy()
	vmi.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{
		MigrationUID: m.UID, SourceNode: vmi.Status.NodeName, TargetNode: target,
		SourcePod: sourcePod, TargetPod: t.Pod, MigrationConfiguration: &cfg, Mode: vmletv1.MigrationPreCopy,
		MigrationPolicyName: policyName,
	}
	vmi.Status.MigrationMethod = Migratable(vmi).Method
	if err := c.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil // read the vmi again
		}
		return ctrl.Result{}, fmt.Errorf("hand the migration to the nodes: %w", err)
	}
	if noPostCopy != "" {
		c.Recorder.Eventf(m, vmi, corev1.EventTypeWarning, ReasonPostCopyUnavailable, "Migrate", "allowPostCopy is off for this migration: %s", noPostCopy)
	}
	setCondition(m, "TargetScheduled", true, "Scheduled", "target node "+target)
	m.Status.MigrationState = vmi.Status.MigrationState.DeepCopy()
	c.advance(m, vmletv1.MigrationScheduled)
	how := "the cluster's migration configuration"
	if policyName != nil {
		how = "migration policy " + *policyName
	}
	c.Recorder.Eventf(m, vmi, corev1.EventTypeNormal, "Scheduled", "Migrate", "migrating vmi %s from node %s to node %s (%s)", vmi.Name, vmi.Status.NodeName, target, how)
	return ctrl.Result{}, nil
}

// label puts LabelSourceNode and LabelTargetNode on the vmi (a merge patch of its labels) so
// that both node agents see it; a no-op when it carries them already.
// Equivalent to: `kubectl label vmi NAME vmlet.dev/migration-source-node=SRC
// vmlet.dev/migration-target-node=DST --overwrite`.
func (c *Controller) label(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, target string) error {
	want := map[string]string{LabelSourceNode: vmi.Status.NodeName, LabelTargetNode: target}
	if vmi.Labels[LabelSourceNode] == want[LabelSourceNode] && vmi.Labels[LabelTargetNode] == want[LabelTargetNode] {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": want, "resourceVersion": vmi.ResourceVersion, // optimistic: the node it leaves is this vmi's node
	}})
	if err != nil {
		return fmt.Errorf("encode the label patch: %w", err)
	}
	if err := c.Client.Patch(ctx, vmi, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("label the vmi with its migration's nodes: %w", err)
	}
	return nil
}

// release deletes what Pick placed for migration m, which ended without its target taking the
// vmi over (cluster mode: its target launcher pod).
func (c *Controller) release(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) error {
	if c.Pods == nil {
		return nil
	}
	return c.Pods.Release(ctx, m, vmi)
}

// follow mirrors the vmi's migrationState and derives the phase from it.
// A cached vmi without this migration's state may be older than the write that handed it to
// the nodes (the migration's own status update wakes it first): the API server has the last
// word.
func (c *Controller) follow(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	if vmi == nil {
		c.fail(m, ReasonVMINotFound, "the vmi was deleted during the migration")
		return ctrl.Result{}, nil
	}
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID != m.UID {
		fresh := &vmletv1.VirtualMachineInstance{}
		if err := c.reader().Get(ctx, client.ObjectKeyFromObject(vmi), fresh); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("read the vmi: %w", err)
		} else if err == nil {
			vmi, ms = fresh, fresh.Status.MigrationState
		}
	}
	if ms == nil || ms.MigrationUID != m.UID {
		c.fail(m, ReasonMigrationFailed, "the vmi no longer carries this migration's state")
		return ctrl.Result{}, nil
	}
	m.Status.MigrationState = ms.DeepCopy()
	p := Progress(ms, vmi.Status.NodeName)
	if p == vmletv1.MigrationFailed {
		c.advance(m, p)
		setCondition(m, "Failed", true, ReasonMigrationFailed, ms.FailureReason)
		return ctrl.Result{}, nil
	}
	c.advance(m, p)
	return ctrl.Result{}, nil
}

// abort handles a deleted migration: one that the nodes run is cancelled first (the source
// agent aborts on abortRequested and says how it went); the finalizer goes once it ended.
func (c *Controller) abort(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(m, Finalizer) {
		return ctrl.Result{}, nil
	}
	if vmi != nil {
		if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == m.UID && !ms.Completed && !ms.Failed {
			if !ms.AbortRequested {
				orig := vmi.DeepCopy()
				ms.AbortRequested, ms.AbortStatus = true, vmletv1.MigrationAbortInProgress
				if err := c.Client.Status().Patch(ctx, vmi, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
					if apierrors.IsConflict(err) {
						return ctrl.Result{RequeueAfter: time.Millisecond}, nil
					}
					return ctrl.Result{}, fmt.Errorf("request abort: %w", err)
				}
				c.Recorder.Eventf(m, vmi, corev1.EventTypeNormal, "AbortRequested", "Abort", "migration deleted: aborting it; the guest stays on node %s", ms.SourceNode)
			}
			return ctrl.Result{}, nil // the vmi's change wakes us
		}
		if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID == m.UID && ms.AbortRequested && ms.AbortStatus == vmletv1.MigrationAbortInProgress {
			// Ended, but the target said so first (its stream was cut): the source's word on
			// the abort follows, and is the migration's last (bounded: a source agent that is
			// gone never says it).
			if end := ms.EndTimestamp; end == nil || c.now().Sub(end.Time) < AbortSettle {
				return ctrl.Result{RequeueAfter: time.Second}, nil // the vmi's change wakes us sooner
			}
		}
	}
	if err := c.release(ctx, m, vmi); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(m, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(c.Client.Update(ctx, m))
}

// ended records a migration's end as events on it and on its vmi.
func (c *Controller) ended(m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) {
	var related runtime.Object // a nil *VirtualMachineInstance would not be a nil Object
	if vmi != nil {
		related = vmi
	}
	if m.Status.Phase == vmletv1.MigrationSucceeded {
		ms := m.Status.MigrationState
		c.Recorder.Eventf(m, related, corev1.EventTypeNormal, "Succeeded", "Migrate", "vmi %s migrated from node %s to node %s", m.Spec.VMIName, ms.SourceNode, ms.TargetNode)
		if vmi != nil {
			c.Recorder.Eventf(vmi, m, corev1.EventTypeNormal, "Migrated", "Migrate", "migrated from node %s to node %s (%s)", ms.SourceNode, ms.TargetNode, m.Name)
		}
		return
	}
	why := failure(m)
	c.Recorder.Eventf(m, related, corev1.EventTypeWarning, "Failed", "Migrate", "%s", why)
	if vmi != nil {
		c.Recorder.Eventf(vmi, m, corev1.EventTypeWarning, "MigrationFailed", "Migrate", "migration %s failed: %s", m.Name, why)
	}
}

func failure(m *vmletv1.VirtualMachineInstanceMigration) string {
	if ms := m.Status.MigrationState; ms != nil && ms.FailureReason != "" {
		return ms.FailureReason
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, "Failed"); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "failed"
}

// fail ends a migration the controller refused or lost. The vmi's state is the agents'.
func (c *Controller) fail(m *vmletv1.VirtualMachineInstanceMigration, reason, msg string) {
	c.advance(m, vmletv1.MigrationFailed)
	setCondition(m, "Failed", true, reason, msg)
	if m.Status.MigrationState == nil {
		now := metav1.NewTime(c.now())
		m.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{
			MigrationUID: m.UID, Failed: true, FailureReason: reason + ": " + msg, EndTimestamp: &now,
		}
	}
}

// advance moves the phase forward, recording the transition time of each phase passed.
func (c *Controller) advance(m *vmletv1.VirtualMachineInstanceMigration, next vmletv1.VirtualMachineInstanceMigrationPhase) {
	for _, p := range Advance(m.Status.Phase, next) {
		m.Status.Phase = p
		if len(m.Status.PhaseTransitionTimestamps) < 16 {
			m.Status.PhaseTransitionTimestamps = append(m.Status.PhaseTransitionTimestamps,
				vmletv1.VirtualMachineInstanceMigrationPhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.NewTime(c.now())})
		}
	}
}

func phaseTime(m *vmletv1.VirtualMachineInstanceMigration, p vmletv1.VirtualMachineInstanceMigrationPhase) time.Time {
	for _, t := range m.Status.PhaseTransitionTimestamps {
		if t.Phase == p {
			return t.PhaseTransitionTimestamp.Time
		}
	}
	return m.CreationTimestamp.Time
}

func setCondition(m *vmletv1.VirtualMachineInstanceMigration, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: m.Generation})
}

// migrations lists the migrations of vmiName ("" = all).
func (c *Controller) migrations(ctx context.Context, vmiName string, opts ...client.ListOption) ([]vmletv1.VirtualMachineInstanceMigration, error) {
	var l vmletv1.VirtualMachineInstanceMigrationList
	if vmiName != "" {
		opts = append(opts, client.MatchingFields{vmiNameIndex: vmiName})
	}
	if err := c.Client.List(ctx, &l, opts...); err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	return l.Items, nil
}

// collect deletes the ended migrations of m's vmi beyond the KeepFinished newest.
func (c *Controller) collect(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration) error {
	all, err := c.migrations(ctx, m.Spec.VMIName, client.InNamespace(m.Namespace))
	if err != nil {
		return err
	}
	var ended []vmletv1.VirtualMachineInstanceMigration
	for _, o := range all {
		if Final(o.Status.Phase) || o.UID == m.UID {
			ended = append(ended, o)
		}
	}
	slices.SortFunc(ended, func(a, b vmletv1.VirtualMachineInstanceMigration) int {
		if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	for i := KeepFinished; i < len(ended); i++ {
		if err := c.Client.Delete(ctx, &ended[i]); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete old migration %s: %w", ended[i].Name, err)
		}
	}
	return nil
}

// config reads the cluster's migration configuration (defaults when the ConfigMap is absent).
func (c *Controller) config(ctx context.Context) (vmletv1.MigrationConfiguration, error) {
	cm := &corev1.ConfigMap{}
	err := c.reader().Get(ctx, types.NamespacedName{Namespace: ConfigNamespace, Name: ConfigName}, cm)
	if apierrors.IsNotFound(err) {
		return Resolve(vmletv1.MigrationConfiguration{}), nil
	}
	if err != nil {
		return vmletv1.MigrationConfiguration{}, fmt.Errorf("read ConfigMap %s/%s: %w", ConfigNamespace, ConfigName, err)
	}
	return ParseConfig(cm.Data[ConfigKey])
}

// launcherPod names where the vmi runs: its launcher pod, or (local mode) its launcher on the
// node.
func launcherPod(vmi *vmletv1.VirtualMachineInstance) string {
	if l := vmi.Status.Launcher; l != nil && l.Pod != "" {
		return l.Pod
	}
	return "launcher/" + vmi.Status.NodeName
}
