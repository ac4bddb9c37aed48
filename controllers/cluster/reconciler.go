package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances,verbs=get;list;watch
// +kubebuilder:rbac:groups=vmlet.dev,resources=virtualmachineinstances/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get

// Reconciler runs launcher pods for VMIs.
type Reconciler struct {
	Client client.Client
	// APIReader reads pods from the API server when the cache has none for a VMI: a pod this
	// controller just created may not be in the cache yet, and a second one must never be made.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Pods      launcherpod.Options
	// AgentGrace is how long a VMI whose launcher pod ended on a node is left to that node's
	// agent, which knows why it ended (QEMUDied, ForcedShutdown, ...), before this controller
	// ends the VMI itself (the agent may be down); zero means DefaultAgentGrace.
	AgentGrace time.Duration

	transitions transitions
}

// TakeoverPoll is how often a VMI whose migration completed is looked at while its source's
// launcher pod ended and its target's agent has not taken it over yet.
const TakeoverPoll = 5 * time.Second

// DefaultAgentGrace is the default Reconciler.AgentGrace. The agent hears of a launcher's
// exit at once (its pod informer), so this only matters when the agent is not running.
const DefaultAgentGrace = 10 * time.Second

// CacheOptions restrict the manager's pod cache to launcher and attachment pods (a cluster has
// many pods).
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}: {Label: launcherpod.PodSelector()},
	}}
}

// SetupWithManager registers the controller: VMIs and the pods they control.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("vmi-launcher-pod").
		For(&vmletv1.VirtualMachineInstance{}).
		Owns(&corev1.Pod{}).
		Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(r.vmisUsingClaim)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(r.vmisUsingClaim)).
		Complete(r)
}

// Reconcile is level-based: it reads the VMI and its pods, acts, and writes the VMI's status
// once if it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vmi := &vmletv1.VirtualMachineInstance{}
	err := r.Client.Get(ctx, req.NamespacedName, vmi)
	if apierrors.IsNotFound(err) {
		// Deleted (no finalizer held it): its pods go too. Owner references would let the
		// garbage collector do it, but do not rely on one running.
		return ctrl.Result{}, r.deleteStale(ctx, req.NamespacedName, "")
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get vmi: %w", err)
	}
	before := vmi.Status.DeepCopy()
	r.transitions.take(vmi.UID) // nothing is left from an earlier pass; be sure
	requeue, err := r.reconcile(ctx, vmi)
	if err != nil {
		r.Recorder.Eventf(vmi, nil, corev1.EventTypeWarning, string(vmistatus.ReasonSyncFailed), "Reconcile", "%v", err)
	}
	if !equality.Semantic.DeepEqual(before, &vmi.Status) {
		uerr := r.Client.Status().Update(ctx, vmi)
		if uerr != nil {
			r.transitions.take(vmi.UID) // not written: the pass that writes it says it
		}
		switch {
		case apierrors.IsConflict(uerr):
			// Someone (the node agent) wrote the VMI since we read it: read everything again.
			return ctrl.Result{RequeueAfter: time.Millisecond}, err
		case uerr != nil && !apierrors.IsNotFound(uerr):
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("update status: %w", uerr))
		}
	}
	for _, send := range r.transitions.take(vmi.UID) {
		send()
	}
	return ctrl.Result{RequeueAfter: requeue}, err
}

// reconcile acts on one VMI; a positive duration asks to look again then.
func (r *Reconciler) reconcile(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (time.Duration, error) {
	key := types.NamespacedName{Namespace: vmi.Namespace, Name: vmi.Name}
	if err := r.deleteStale(ctx, key, vmi.UID); err != nil {
		return 0, err
	}
	pods, err := r.pods(ctx, vmi)
	if err != nil {
		return 0, err
	}
	switch {
	case !vmi.DeletionTimestamp.IsZero():
		return 0, errors.Join(r.deletePods(ctx, vmi, pods, "the VMI is being deleted"), r.deleteAttachments(ctx, vmi))
	case vmistatus.IsFinal(vmi.Status.Phase):
		return 0, errors.Join(r.deletePods(ctx, vmi, pods, "the VMI is "+string(vmi.Status.Phase)), r.deleteAttachments(ctx, vmi))
	}
	pod, extra, targets := pick(vmi, pods)
	why := "a VMI has one launcher pod"
	if ms := vmi.Status.MigrationState; pod != nil && ms != nil && ms.Completed && pod.Spec.NodeName == ms.TargetNode {
		why = "the VMI migrated to node " + ms.TargetNode + " (" + pod.Name + ")"
	}
	if err := r.deletePods(ctx, vmi, extra, why); err != nil {
		return 0, err
	}
	switch wait, lost := handover(vmi, pod, targets); {
	case wait:
		return TakeoverPoll, nil // the takeover (a status write) wakes it sooner
	case lost != "":
		r.fail(vmi, vmistatus.ReasonLauncherPodFailed, lost)
		return 0, nil
	}
	if pod == nil {
		if name := podName(vmi); name != "" || vmi.Status.NodeName != "" {
			// It had one (its name is in the status, or it was scheduled): deleted or evicted.
			what := "the launcher pod"
			if name != "" {
				what += " " + name
			}
			r.fail(vmi, vmistatus.ReasonLauncherPodDeleted, what+" was deleted")
			return 0, nil
		}
		return 0, r.create(ctx, vmi)
	}
	if wait := r.leftToAgent(vmi, pod, time.Now()); wait > 0 {
		return wait, nil
	}
	clearClaimWait(vmi) // its pod exists: the claims resolved (a status write may have been lost)
	r.observe(vmi, pod)
	if pod.Spec.NodeName == "" || !pod.DeletionTimestamp.IsZero() {
		return 0, nil
	}
	return 0, r.attach(ctx, vmi, pod)
}

// leftToAgent is how much longer a VMI whose launcher container ended on a node stays the node
// agent's to end (with the reason only it knows); 0 once this controller should act.
func (r *Reconciler) leftToAgent(vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod, now time.Time) time.Duration {
	if vmi.Status.NodeName == "" || (pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded) ||
		NodeUnresponsive(vmi) { // no agent to wait for
		return 0
	}
	var ended time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == launcherpod.ContainerName && t != nil {
			ended = t.FinishedAt.Time
		}
	}
	if ended.IsZero() {
		return 0 // no time to count from (an eviction, say): the pod's story is all there is
	}
	grace := r.AgentGrace
	if grace <= 0 {
		grace = DefaultAgentGrace
	}
	return max(ended.Add(grace).Sub(now), 0)
}

// pods are the VMI's launcher pods: from the cache, or from the API server when the cache has
// none (it may lag behind a Create of the previous pass).
func (r *Reconciler) pods(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) ([]corev1.Pod, error) {
	sel := []client.ListOption{client.InNamespace(vmi.Namespace), launcherpod.MatchingVMI(vmi.UID)}
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, sel...); err != nil {
		return nil, fmt.Errorf("list launcher pods: %w", err)
	}
	if len(list.Items) > 0 {
		return list.Items, nil
	}
	if err := r.APIReader.List(ctx, list, sel...); err != nil {
		return nil, fmt.Errorf("list launcher pods from the api server: %w", err)
	}
	return list.Items, nil
}

// create makes the VMI's launcher pod.
func (r *Reconciler) create(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	o := r.Pods
	if o.SELinuxType == "" {
		t, err := r.selinuxType(ctx)
		if err != nil {
			vmistatus.NotSynchronized(vmi, vmistatus.ReasonFailedCreate, err.Error())
			return err
		}
		o.SELinuxType = t
	}
	claims, problem, err := r.claims(ctx, vmi, o)
	if err != nil {
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonFailedCreate, err.Error())
		return err
	}
	if problem != nil {
		r.waitForClaim(vmi, problem)
		return nil
	}
	clearClaimWait(vmi)
	pod, err := launcherpod.Build(vmi, o, claims)
	if errors.Is(err, launcherpod.ErrOptions) {
		return err
	}
	if err != nil {
		r.fail(vmi, vmistatus.ReasonInvalidSpec, err.Error())
		return nil
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonFailedCreate, err.Error())
		return fmt.Errorf("create launcher pod: %w", err)
	}
	r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, string(vmistatus.ReasonSuccessfulCreate), "CreatePod", "created launcher pod %s", pod.Name)
	setPodName(vmi, pod.Name)
	vmistatus.SetPhase(vmi, vmletv1.Scheduling)
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonScheduling,
		fmt.Sprintf("waiting for launcher pod %s to be scheduled", pod.Name))
	return nil
}

// deletePods deletes pods (those not already terminating), saying why in an Event.
func (r *Reconciler) deletePods(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, pods []corev1.Pod, why string) error {
	var errs []error
	for i := range pods {
		p := &pods[i]
		if !p.DeletionTimestamp.IsZero() {
			continue
		}
		if err := deletePod(ctx, r.Client, p); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Recorder.Eventf(vmi, p, corev1.EventTypeNormal, string(vmistatus.ReasonSuccessfulDelete), "DeletePod", "deleted launcher pod %s: %s", p.Name, why)
	}
	return errors.Join(errs...)
}

// deleteStale deletes launcher and attachment pods controlled by an earlier VMI of the same
// name: one whose UID is not uid (any, when uid is empty: the VMI is gone).
func (r *Reconciler) deleteStale(ctx context.Context, key types.NamespacedName, uid types.UID) error {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(key.Namespace),
		client.MatchingLabelsSelector{Selector: launcherpod.PodSelector()}); err != nil {
		return fmt.Errorf("list launcher pods: %w", err)
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		ref := metav1.GetControllerOf(p)
		if ref == nil || ref.Kind != "VirtualMachineInstance" || ref.Name != key.Name || ref.UID == uid || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if err := deletePod(ctx, r.Client, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func deletePod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	err := c.Delete(ctx, p, client.Preconditions{UID: &p.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete launcher pod %s: %w", p.Name, err)
	}
	return nil
}

// selinuxType is the cluster's launcher SELinux type: vmlet-config's selinuxLauncherType,
// read from the API server when a pod is made (a change applies to the pods made after it);
// "" when the ConfigMap or the key is absent.
func (r *Reconciler) selinuxType(ctx context.Context) (string, error) {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	cm := &corev1.ConfigMap{}
	err := reader.Get(ctx, client.ObjectKey{Namespace: migration.ConfigNamespace, Name: migration.ConfigName}, cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read ConfigMap %s/%s: %w", migration.ConfigNamespace, migration.ConfigName, err)
	}
	t, err := launcherpod.ParseSELinuxType(cm.Data[launcherpod.ConfigKeySELinuxLauncherType])
	if err != nil {
		return "", fmt.Errorf("ConfigMap %s/%s: %w", migration.ConfigNamespace, migration.ConfigName, err)
	}
	return t, nil
}
