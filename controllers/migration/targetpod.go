package migration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// ErrTargetPodEnded is a target launcher pod that ended or is being deleted before the
// migration was handed to the nodes: the migration fails.
var ErrTargetPodEnded = errors.New("the target launcher pod ended before the migration started")

// TargetPods places migration targets in cluster mode (Controller.Pick is its Pick): a
// migration's target is a launcher pod that kube-scheduler binds, KubeVirt's target
// virt-launcher pod. It is the pod launcherpod.Build makes for the vmi, built from what the
// source pod was given (its claims and SELinux type, the source's SELinux level unless the
// migration configuration says matchSELinuxLevelOnMigration: false), labelled with the
// migration (launcherpod.LabelMigrationUID, LabelMigrationRole target), owned by the vmi,
// and kept off the source node by a required node affinity.
type TargetPods struct {
	// Client reads pods from the manager's cache (launcher pods only: cluster.CacheOptions)
	// and creates and deletes them.
	Client client.Client
	// APIReader finds a target pod the cache does not show yet (made by the previous pass):
	// a second one must never be made. Nil means Client.
	APIReader client.Reader
	// Pods are the cluster's launcher pod options: the cluster controller's.
	Pods launcherpod.Options
}

var _ Picker = (&TargetPods{}).Pick

// Pick makes the migration's target pod (once: it finds it by label first) and returns its
// node once kube-scheduler bound it. Until then it says why not: the scheduler's message
// (the pod's PodScheduled=False condition), or that the pod waits to be scheduled.
func (t *TargetPods) Pick(ctx context.Context, req TargetRequest) (Target, error) {
	m, vmi := req.Migration, req.VMI
	pod, err := t.find(ctx, vmi, m.UID)
	if err != nil {
		return Target{}, err
	}
	source, err := t.source(ctx, vmi, m.UID)
	if err != nil {
		return Target{}, err
	}
	if pod == nil {
		hot, err := t.hotClaims(ctx, vmi, source)
		if err != nil {
			return Target{}, err
		}
		pod, err = TargetPod(req, source, hot, t.Pods)
		if err != nil {
			return Target{}, err
		}
		if err := t.Client.Create(ctx, pod); err != nil {
			return Target{}, fmt.Errorf("create the target launcher pod: %w", err)
		}
	}
	switch {
	case !pod.DeletionTimestamp.IsZero():
		return Target{}, fmt.Errorf("%w: pod %s is being deleted", ErrTargetPodEnded, pod.Name)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return Target{}, fmt.Errorf("%w: pod %s is %s %s", ErrTargetPodEnded, pod.Name, pod.Status.Phase, pod.Status.Reason)
	case pod.Spec.NodeName == "":
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
				return Target{}, fmt.Errorf("the target launcher pod %s cannot be scheduled: %s", pod.Name, c.Message)
			}
		}
		return Target{}, fmt.Errorf("waiting for the target launcher pod %s to be scheduled", pod.Name)
	}
	return Target{Node: pod.Spec.NodeName, Pod: pod.Name, SourcePod: source.Name}, nil
}

// find returns the vmi's target pod for the migration: from the cache, else from the API
// server; nil when there is none.
func (t *TargetPods) find(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, migrationUID types.UID) (*corev1.Pod, error) {
	sel := []client.ListOption{client.InNamespace(vmi.Namespace), launcherpod.MatchingVMI(vmi.UID),
		client.MatchingLabels{launcherpod.LabelMigrationUID: string(migrationUID), launcherpod.LabelMigrationRole: launcherpod.MigrationRoleTarget}}
	for _, r := range []client.Reader{t.Client, t.reader()} {
		var l corev1.PodList
		if err := r.List(ctx, &l, sel...); err != nil {
			return nil, fmt.Errorf("list target launcher pods: %w", err)
		}
		if len(l.Items) > 0 {
			oldest := slices.MinFunc(l.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
			return &oldest, nil
		}
	}
	return nil, nil
}

// source is the vmi's live launcher pod on its node (the one its status names when there are
// several).
func (t *TargetPods) source(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, migrationUID types.UID) (*corev1.Pod, error) {
	var l corev1.PodList
	if err := t.Client.List(ctx, &l, client.InNamespace(vmi.Namespace), launcherpod.MatchingVMI(vmi.UID)); err != nil {
		return nil, fmt.Errorf("list launcher pods: %w", err)
	}
	var found *corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		if p.Spec.NodeName != vmi.Status.NodeName || launcherpod.MigrationTarget(p) == migrationUID ||
			!p.DeletionTimestamp.IsZero() || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if found == nil || p.Name == launcherPod(vmi) {
			found = p
		}
	}
	if found == nil {
		return nil, fmt.Errorf("the vmi has no live launcher pod on node %s to migrate from", vmi.Status.NodeName)
	}
	return found, nil
}

func (t *TargetPods) reader() client.Reader {
	if t.APIReader != nil {
		return t.APIReader
	}
	return t.Client
}

// Release deletes the target pods of migration m that did not become the vmi's pod (its
// target never took the vmi over): m failed, was aborted or deleted. vmi may be nil (gone).
// A migration that completed made its target pod the vmi's: deleting such a migration (a
// user tidying up right after Succeeded) deletes no pod, even while the cache still shows the
// vmi on its source; the vmi is read from the API server to know.
func (t *TargetPods) Release(ctx context.Context, m *vmletv1.VirtualMachineInstanceMigration, vmi *vmletv1.VirtualMachineInstance) error {
	if m.Status.Phase == vmletv1.MigrationSucceeded {
		return nil
	}
	if vmi != nil {
		fresh := &vmletv1.VirtualMachineInstance{}
		switch err := t.reader().Get(ctx, client.ObjectKeyFromObject(vmi), fresh); {
		case apierrors.IsNotFound(err):
			vmi = nil
		case err != nil:
			return fmt.Errorf("read the vmi: %w", err)
		default:
			vmi = fresh
		}
	}
	if ms := vmiMigration(vmi); ms != nil && ms.MigrationUID == m.UID && ms.Completed {
		return nil
	}
	var l corev1.PodList
	if err := t.Client.List(ctx, &l, client.InNamespace(m.Namespace), client.MatchingLabels{
		launcherpod.LabelMigrationUID: string(m.UID), launcherpod.LabelMigrationRole: launcherpod.MigrationRoleTarget}); err != nil {
		return fmt.Errorf("list target launcher pods: %w", err)
	}
	var errs []error
	for i := range l.Items {
		p := &l.Items[i]
		if !p.DeletionTimestamp.IsZero() || (vmi != nil && runsVMI(vmi, p)) {
			continue
		}
		if err := t.Client.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete target launcher pod %s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// runsVMI reports whether pod is (or may be) where the vmi runs: a pod of its node or the one
// its status names. Such a pod is never a failed migration's to delete.
func runsVMI(vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) bool {
	return (vmi.Status.NodeName != "" && pod.Spec.NodeName == vmi.Status.NodeName) || pod.Name == launcherPod(vmi)
}

// forTargetPod maps a target launcher pod to the migrations of its vmi (a bind wakes the
// migration waiting for it).
func (c *Controller) forTargetPod(ctx context.Context, o client.Object) []reconcile.Request {
	pod, ok := o.(*corev1.Pod)
	if !ok || launcherpod.MigrationTarget(pod) == "" {
		return nil
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.Kind != "VirtualMachineInstance" {
		return nil
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Namespace, vmi.Name = pod.Namespace, ref.Name
	return c.forVMI(ctx, vmi)
}

// hotClaims are the claims the vmi's attachment pods hold on the source pod's node (its
// hot-plugged volumes): the target's pod mounts them, so that its QEMU starts with the disks the
// source's guest has (and the kube-scheduler places it where they can be mounted).
func (t *TargetPods) hotClaims(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, source *corev1.Pod) ([]launcherpod.Claim, error) {
	var l corev1.PodList
	if err := t.Client.List(ctx, &l, client.InNamespace(vmi.Namespace), client.MatchingLabels(launcherpod.MatchingAttachments(vmi.UID))); err != nil {
		return nil, fmt.Errorf("list attachment pods: %w", err)
	}
	var out []launcherpod.Claim
	for i := range l.Items {
		p := &l.Items[i]
		if !launcherpod.AttachmentReady(p) || p.Spec.NodeName != source.Spec.NodeName {
			continue
		}
		c, err := launcherpod.PodClaims(p)
		if err != nil {
			return nil, err
		}
		out = append(out, c...)
	}
	return out, nil
}

// TargetPod is the launcher pod of req's migration target: launcherpod.Build's pod for the
// vmi with the source pod's claims (launcherpod.AnnotClaims) and those of hot (the claims of
// the source's hot-plugged volumes, which its attachment pods hold), the source's SELinux type, the level
// launcherpod.TargetSELinuxLevel gives (the source's unless the configuration says
// otherwise), the labels launcherpod.LabelMigrationUID and LabelMigrationRole, and a required
// node affinity that keeps it off the source node (KubeVirt's target pod anti-affinity to
// the source): every nodeSelectorTerm gets
//
//	matchFields: [{key: metadata.name, operator: NotIn, values: [<source node>]}]
//
// next to the vmi's nodeSelector, which the pod carries. Pure.
func TargetPod(req TargetRequest, source *corev1.Pod, hot []launcherpod.Claim, o launcherpod.Options) (*corev1.Pod, error) {
	vmi := req.VMI
	claims, err := launcherpod.PodClaims(source)
	if err != nil {
		return nil, fmt.Errorf("source launcher pod %s: %w", source.Name, err)
	}
	for _, c := range hot {
		if !slices.ContainsFunc(claims, func(have launcherpod.Claim) bool { return have.ClaimName == c.ClaimName }) {
			claims = append(claims, c)
		}
	}
	if sc := source.Spec.SecurityContext; sc != nil && sc.SELinuxOptions != nil && sc.SELinuxOptions.Type != "" {
		o.SELinuxType = sc.SELinuxOptions.Type // both launchers share the vmi's files
	}
	if o.SELinuxLevel, err = launcherpod.TargetSELinuxLevel(vmi, req.Config); err != nil {
		return nil, err
	}
	pod, err := launcherpod.Build(vmi, o, claims)
	if err != nil {
		return nil, fmt.Errorf("build the target launcher pod: %w", err)
	}
	pod.Labels = maps.Clone(pod.Labels)
	pod.Labels[launcherpod.LabelMigrationUID] = string(req.Migration.UID)
	pod.Labels[launcherpod.LabelMigrationRole] = launcherpod.MigrationRoleTarget
	pod.Spec.NodeSelector = AddNodeSelector(pod.Spec.NodeSelector, req.Migration.Spec.AddedNodeSelector)
	avoidNode(&pod.Spec, vmi.Status.NodeName)
	return pod, nil
}

// AddNodeSelector is selector with the migration's addedNodeSelector: its keys that selector
// lacks are added, the others keep selector's values (it narrows the target's nodes, never
// widens them). selector is not changed. Pure.
func AddNodeSelector(selector, added map[string]string) map[string]string {
	if len(added) == 0 {
		return selector
	}
	out := maps.Clone(selector)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range added {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// avoidNode adds a required node affinity term requirement that keeps the pod off node.
func avoidNode(spec *corev1.PodSpec, node string) {
	notIn := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{node}}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	req := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(req.NodeSelectorTerms) == 0 {
		req.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range req.NodeSelectorTerms { // terms are ORed: each must exclude the node
		req.NodeSelectorTerms[i].MatchFields = append(req.NodeSelectorTerms[i].MatchFields, notIn)
	}
}

// vmiMigration is the vmi's migrationState (nil for a nil vmi).
func vmiMigration(vmi *vmletv1.VirtualMachineInstance) *vmletv1.VirtualMachineInstanceMigrationState {
	if vmi == nil {
		return nil
	}
	return vmi.Status.MigrationState
}
