package kubeletsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Scheduler binds every unbound pod whose nodeSelector matches the node's labels to the node.
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
	b := &corev1.Binding{Target: corev1.ObjectReference{Kind: "Node", Name: s.NodeName}}
	b.Name, b.Namespace, b.UID = pod.Name, pod.Namespace, pod.UID
	if err := s.Client.SubResource("binding").Create(ctx, pod, b); err != nil && !apierrors.IsConflict(err) {
		return ctrl.Result{}, fmt.Errorf("bind pod: %w", err)
	}
	return ctrl.Result{}, nil
}
