package kubeletsim

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// nodeLifecycle removes the node.kubernetes.io/not-ready taint from a Kubelet's Node, which
// the API server's TaintNodesByCondition admission puts on every new Node: kube-controller-
// manager's node lifecycle controller removes it once the node's kubelet reports Ready, and
// this kubelet is ready as soon as it runs. (Scheduler honours taints, as kube-scheduler does.)
type nodeLifecycle struct{ k *Kubelet }

func (k *Kubelet) setupNodeLifecycle(mgr ctrl.Manager) error {
	isNode := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == k.NodeName })
	return ctrl.NewControllerManagedBy(mgr).Named("sim-node-lifecycle").
		For(&corev1.Node{}, builder.WithPredicates(isNode)).Complete(&nodeLifecycle{k: k})
}

// Reconcile removes the not-ready taint when the Node has it.
func (n *nodeLifecycle) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	if err := n.k.Client.Get(ctx, req.NamespacedName, node); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	notReady := func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }
	if !slices.ContainsFunc(node.Spec.Taints, notReady) {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, notReady)
	if err := n.k.Client.Patch(ctx, node, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("remove the not-ready taint: %w", err)
	}
	return ctrl.Result{}, nil
}
