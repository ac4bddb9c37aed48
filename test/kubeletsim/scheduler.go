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
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// unschedulableRetry is how soon a pod that does not fit is tried again.
const unschedulableRetry = time.Second

// Scheduler binds every unbound pod whose nodeSelector matches the node's labels and whose
// device plugin resources the node allocates (insufficient) to the node; a pod that does not
// fit gets kube-scheduler's PodScheduled=False condition (reason Unschedulable).
type Scheduler struct {
	Client   client.Client
	NodeName string
}

// SetupWithManager registers the scheduler.
func (s *Scheduler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("sim-scheduler").For(&corev1.Pod{}).Complete(s)
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
	node := &corev1.Node{}
	if err := s.Client.Get(ctx, client.ObjectKey{Name: s.NodeName}, node); err != nil {
		return ctrl.Result{}, fmt.Errorf("get node: %w", err)
	}
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return ctrl.Result{}, nil
	}
	if why := insufficient(pod, node); len(why) > 0 {
		// Pending, as kube-scheduler leaves it, and tried again (its backoff).
		return ctrl.Result{RequeueAfter: unschedulableRetry}, s.unschedulable(ctx, pod, fmt.Sprintf("0/1 nodes are available: 1 %s.", strings.Join(why, ", 1 ")))
	}
	b := &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: s.NodeName}}
	b.Name, b.Namespace, b.UID = pod.Name, pod.Namespace, pod.UID
	if err := s.Client.SubResource("binding").Create(ctx, pod, b); err != nil && !apierrors.IsConflict(err) {
		return ctrl.Result{}, fmt.Errorf("bind pod: %w", err)
	}
	return ctrl.Result{}, nil
}

// unschedulable records why pod does not fit, as kube-scheduler does (PodScheduled False,
// Unschedulable, "0/1 nodes are available: ...").
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
