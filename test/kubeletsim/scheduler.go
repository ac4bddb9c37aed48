package kubeletsim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// unschedulableRetry is how soon a pod that does not fit is tried again.
const unschedulableRetry = time.Second

// Scheduler binds every unbound pod to the first of its nodes that fits it (fits: nodeSelector,
// required node affinity with matchExpressions and matchFields, spec.unschedulable,
// NoSchedule/NoExecute taints without a toleration, device plugin resources); a pod no node fits
// gets kube-scheduler's PodScheduled=False condition (reason Unschedulable) with one reason per
// node.
type Scheduler struct {
	Client client.Client
	// Nodes are the nodes it places pods on, tried in order; empty means NodeName alone.
	Nodes    []string
	NodeName string
}

// SetupWithManager registers the scheduler.
func (s *Scheduler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-scheduler").For(&corev1.Pod{}).Complete(s)
}

func (s *Scheduler) nodes() []string {
	if len(s.Nodes) > 0 {
		return s.Nodes
	}
	return []string{s.NodeName}
}

// Reconcile binds one pod. Equivalent to kube-scheduler's POST pods/<name>/binding.
func (s *Scheduler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pod := &corev1.Pod{}
	if err := s.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	var why []string
	target := ""
	for _, name := range s.nodes() {
		node := &corev1.Node{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, node); apierrors.IsNotFound(err) {
			why = append(why, "node(s) not registered yet")
			continue
		} else if err != nil {
			return ctrl.Result{}, fmt.Errorf("get node: %w", err)
		}
		if r := fits(pod, node); len(r) > 0 {
			why = append(why, r...)
			continue
		}
		target = name
		break
	}
	if target == "" {
		// Pending, as kube-scheduler leaves it, and tried again (its backoff).
		msg := fmt.Sprintf("0/%d nodes are available: 1 %s.", len(s.nodes()), strings.Join(why, ", 1 "))
		return ctrl.Result{RequeueAfter: unschedulableRetry}, s.unschedulable(ctx, pod, msg)
	}
	b := &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: target}}
	b.Name, b.Namespace, b.UID = pod.Name, pod.Namespace, pod.UID
	if err := s.Client.SubResource("binding").Create(ctx, pod, b); err != nil && !apierrors.IsConflict(err) {
		return ctrl.Result{}, fmt.Errorf("bind pod: %w", err)
	}
	return ctrl.Result{}, nil
}

// fits says why pod does not fit node (nothing: it fits), in kube-scheduler's words.
func fits(pod *corev1.Pod, node *corev1.Node) []string {
	if !matchesAffinity(pod, node) {
		return []string{"node(s) didn't match Pod's node affinity/selector"}
	}
	if node.Spec.Unschedulable && !tolerates(pod, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}) {
		return []string{"node(s) were unschedulable"}
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect != corev1.TaintEffectPreferNoSchedule && !tolerates(pod, taint) {
			return []string{fmt.Sprintf("node(s) had untolerated taint {%s: %s}", taint.Key, taint.Value)}
		}
	}
	return insufficient(pod, node)
}

// tolerates reports whether one of pod's tolerations tolerates taint.
func tolerates(pod *corev1.Pod, taint corev1.Taint) bool {
	return slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		if t.Effect != "" && t.Effect != taint.Effect {
			return false
		}
		if t.Key == "" {
			return t.Operator == corev1.TolerationOpExists // tolerates every taint
		}
		if t.Key != taint.Key {
			return false
		}
		return t.Operator == corev1.TolerationOpExists || t.Value == taint.Value // "" operator is Equal
	})
}

// matchesAffinity reports whether node satisfies pod's nodeSelector and its required node
// affinity: one of the nodeSelectorTerms (ORed) whose matchExpressions (on labels) and
// matchFields (metadata.name only, as in Kubernetes) all hold.
func matchesAffinity(pod *corev1.Pod, node *corev1.Node) bool {
	for k, v := range pod.Spec.NodeSelector {
		if node.Labels[k] != v {
			return false
		}
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	fields := map[string]string{metav1.ObjectNameField: node.Name}
	return slices.ContainsFunc(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, func(t corev1.NodeSelectorTerm) bool {
		if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
			return false // an empty term matches no node
		}
		for _, r := range t.MatchExpressions {
			if !requirementHolds(r, node.Labels) {
				return false
			}
		}
		for _, r := range t.MatchFields {
			if !requirementHolds(r, fields) {
				return false
			}
		}
		return true
	})
}

// requirementHolds evaluates one node selector requirement on values (labels or fields).
func requirementHolds(r corev1.NodeSelectorRequirement, values map[string]string) bool {
	v, ok := values[r.Key]
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return ok && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return !ok || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return ok
	case corev1.NodeSelectorOpDoesNotExist:
		return !ok
	}
	return false // Gt and Lt: vmlet's pods never ask for them
}

// unschedulable records why pod does not fit, as kube-scheduler does (PodScheduled False,
// Unschedulable, "0/N nodes are available: ...").
func (s *Scheduler) unschedulable(ctx context.Context, pod *corev1.Pod, msg string) error {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message == msg {
			return nil
		}
	}
	patch := client.MergeFrom(pod.DeepCopy())
	conds := slices.DeleteFunc(slices.Clone(pod.Status.Conditions), func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled })
	pod.Status.Conditions = append(conds, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: msg, LastTransitionTime: metav1.Now()})
	if err := s.Client.Status().Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("pod unschedulable: %w", err)
	}
	return nil
}
