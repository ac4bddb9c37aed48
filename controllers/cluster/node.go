package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// NodeController is KubeVirt's virt-controller node controller (pkg/virt-controller/watch/node)
// for vmlet: a Node whose vmlet heartbeat (controllers.AnnotHeartbeat) is older than three of
// its agent's intervals gets controllers.LabelSchedulable=false (launcher pods select "true")
// and a NodeUnresponsive Event; each of its VMIs gets Ready=False, reason NodeUnresponsive; a
// VMI whose launcher pod is gone or no longer running (phase Failed or Succeeded, or every
// container terminated) moves to Failed with that reason, its Event saying so. KubeVirt waits
// five minutes and looks again every minute; vmlet's agents publish their interval and this
// controller looks again exactly when a heartbeat goes stale, and on every change to the
// node, its VMIs or their pods. A node that never had a vmlet heartbeat is left alone (as
// KubeVirt does); one beating again is schedulable again by its own heartbeat.
type NodeController struct {
	Client client.Client
	// APIReader confirms from the API server that a VMI's launcher pod is gone before the VMI
	// is failed (the cache may lag behind a pod's creation).
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Interval is the heartbeat interval of agents that publish none
	// (controllers.AnnotHeartbeatInterval); zero means controllers.DefaultHeartbeat.
	Interval time.Duration
}

// SetupWithManager registers the controller: Nodes, and the VMIs and launcher pods on them.
func (c *NodeController) SetupWithManager(mgr ctrl.Manager) error {
	byVMINode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		v, ok := o.(*vmletv1.VirtualMachineInstance)
		if !ok || v.Status.NodeName == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: v.Status.NodeName}}}
	})
	byPodNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		p, ok := o.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: p.Spec.NodeName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("vmlet-node").
		For(&corev1.Node{}).
		Watches(&vmletv1.VirtualMachineInstance{}, byVMINode).
		Watches(&corev1.Pod{}, byPodNode).
		Complete(c)
}

// Reconcile looks at one node: fresh, it asks to look again when its heartbeat goes stale;
// stale (or deleted), it marks the node and handles its VMIs.
func (c *NodeController) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	node := &corev1.Node{}
	err := c.Client.Get(ctx, req.NamespacedName, node)
	switch {
	case apierrors.IsNotFound(err):
		node = nil // deleted: as unresponsive as a node gets (KubeVirt too)
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get node: %w", err)
	}
	var why string
	if node != nil {
		deadline, ok := controllers.HeartbeatDeadline(node, c.interval())
		if !ok {
			return ctrl.Result{}, nil // not a vmlet node (or not yet)
		}
		if left := time.Until(deadline); left >= 0 {
			// A little past the deadline: "older than three intervals" holds then.
			return ctrl.Result{RequeueAfter: left + 10*time.Millisecond}, nil
		}
		why = fmt.Sprintf("the vmlet agent on node %s is not responsive: no heartbeat since %s (%s)",
			req.Name, node.Annotations[controllers.AnnotHeartbeat], staleFor(node, c.interval()))
		if err := c.markUnschedulable(ctx, node); apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil // a beat came meanwhile: look again
		} else if err != nil {
			return ctrl.Result{}, err
		}
	} else {
		why = fmt.Sprintf("node %s was deleted", req.Name)
	}
	conflict, err := c.handleVMIs(ctx, req.Name, why)
	if conflict && err == nil {
		// Someone (the other controller failing the same VMI) wrote it meanwhile: read again.
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	return ctrl.Result{}, err
}

func (c *NodeController) interval() time.Duration {
	if c.Interval <= 0 {
		return controllers.DefaultHeartbeat
	}
	return c.Interval
}

// staleFor says how much older than allowed the node's heartbeat is.
func staleFor(node *corev1.Node, fallback time.Duration) string {
	d, _ := controllers.HeartbeatDeadline(node, fallback)
	iv := node.Annotations[controllers.AnnotHeartbeatInterval]
	if iv == "" {
		iv = fallback.String()
	}
	return fmt.Sprintf("3 × %s heartbeat interval, stale for %s", iv, time.Since(d).Round(time.Millisecond))
}

// markUnschedulable sets LabelSchedulable=false with an Event, once. The patch carries the
// resourceVersion read: a heartbeat written meanwhile wins (conflict: look again).
func (c *NodeController) markUnschedulable(ctx context.Context, node *corev1.Node) error {
	if node.Labels[controllers.LabelSchedulable] == "false" {
		return nil
	}
	patch := client.MergeFromWithOptions(node.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	node.Labels[controllers.LabelSchedulable] = "false"
	if err := c.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("mark node %s unschedulable: %w", node.Name, err)
	}
	c.Recorder.Eventf(node, nil, corev1.EventTypeNormal, string(vmistatus.ReasonNodeUnresponsive), "MarkUnschedulable",
		"vmlet agent is not responsive, marking node as unresponsive (%s=false)", controllers.LabelSchedulable)
	return nil
}

// handleVMIs marks the node's active VMIs Ready=False (NodeUnresponsive) and fails those whose
// launcher pod is not alive. conflict: a VMI changed since the cache showed it.
func (c *NodeController) handleVMIs(ctx context.Context, nodeName, why string) (conflict bool, _ error) {
	var vmis vmletv1.VirtualMachineInstanceList
	if err := c.Client.List(ctx, &vmis); err != nil {
		return false, fmt.Errorf("list vmis: %w", err)
	}
	var active []*vmletv1.VirtualMachineInstance
	for i := range vmis.Items {
		v := &vmis.Items[i]
		if v.Status.NodeName == nodeName && !vmistatus.IsFinal(v.Status.Phase) {
			active = append(active, v)
		}
	}
	if len(active) == 0 {
		return false, nil
	}
	alive, err := c.alivePods(ctx, nodeName)
	if err != nil {
		return false, err
	}
	var errs []error
	for _, v := range active { // one at a time: no update storm when something is already wrong
		before := v.Status.DeepCopy()
		if alive[v.UID] {
			vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonNodeUnresponsive, why)
		} else if vmistatus.Fail(v, vmistatus.ReasonNodeUnresponsive, why+"; its launcher pod is gone") {
			// Warning, as every VMI failure here: the pod reconciler, which may see the pod's
			// end first, fails it with the same reason (KubeVirt's node controller says Normal).
			c.Recorder.Eventf(v, nil, corev1.EventTypeWarning, string(vmistatus.ReasonNodeUnresponsive), "Fail",
				"vmlet agent on node %s is not responsive, marking VMI as failed", nodeName)
		}
		if equality.Semantic.DeepEqual(before, &v.Status) {
			continue
		}
		err := c.Client.Status().Update(ctx, v)
		switch {
		case apierrors.IsConflict(err):
			conflict = true
		case err != nil && !apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("update vmi %s/%s: %w", v.Namespace, v.Name, err))
		}
	}
	return conflict, errors.Join(errs...)
}

// alivePods are the VMIs (by UID) with a live launcher pod on the node, read from the API
// server: not Failed or Succeeded, not every container terminated (KubeVirt's
// alivePodsOnNode; a terminating pod whose launcher still runs is alive).
func (c *NodeController) alivePods(ctx context.Context, nodeName string) (map[types.UID]bool, error) {
	var l corev1.PodList
	if err := c.APIReader.List(ctx, &l, client.MatchingLabels{launcherpod.LabelAppName: launcherpod.AppName}); err != nil {
		return nil, fmt.Errorf("list launcher pods: %w", err)
	}
	alive := map[types.UID]bool{}
	for i := range l.Items {
		p := &l.Items[i]
		ref := metav1.GetControllerOf(p)
		if p.Spec.NodeName != nodeName || ref == nil || ref.Kind != "VirtualMachineInstance" || !podAlive(p) {
			continue
		}
		alive[ref.UID] = true
	}
	return alive, nil
}

func podAlive(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return true
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Terminated == nil {
			return true
		}
	}
	return false
}

// NodeUnresponsive reports whether the VMI's Ready condition says its node is unresponsive
// (NodeController wrote it): whatever else ends the VMI ends it with that reason.
func NodeUnresponsive(vmi *vmletv1.VirtualMachineInstance) bool {
	c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	return c != nil && c.Reason == string(vmistatus.ReasonNodeUnresponsive)
}
