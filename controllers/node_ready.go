package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reasons of the Node's Ready condition when vmlet owns it (Heartbeat.OwnsReady).
const (
	// ReasonVmletReady is Ready=True: the kubelet's KubeletReady.
	ReasonVmletReady = "VmletReady"
	// ReasonVmletStopped is Ready=False after vmlet stopped and left its VMs running
	// (`vmlet local --keep-vms`): nobody manages them until the next start.
	ReasonVmletStopped = "VmletStopped"
)

// SetNotReady writes the Node's Ready=False with reason and message (a graceful node shutdown:
// vmistatus.ReasonNodeShutdown, as the kubelet's graceful node shutdown marks its node NotReady). With no
// kube-controller-manager in local mode nothing would ever turn a stale Ready=True to Unknown,
// so a vmlet that stops says it. A no-op unless OwnsReady. Call once the heartbeat stopped.
func (h *Heartbeat) SetNotReady(ctx context.Context, reason, msg string) error {
	if !h.OwnsReady {
		return nil
	}
	node := &corev1.Node{}
	if err := h.Client.Get(ctx, client.ObjectKey{Name: h.NodeName}, node); err != nil {
		return fmt.Errorf("get node: %w", err)
	}
	return h.setReady(ctx, node, corev1.ConditionFalse, reason, msg)
}

// setReady sets the Node's Ready condition through the status subresource (a strategic merge
// patch: the other conditions stay as they are). Equivalent to the kubelet's node status update.
func (h *Heartbeat) setReady(ctx context.Context, node *corev1.Node, status corev1.ConditionStatus, reason, msg string) error {
	patch := client.StrategicMergeFrom(node.DeepCopy())
	now := metav1.Now()
	c := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now}
	found := false
	for i, old := range node.Status.Conditions {
		if old.Type != corev1.NodeReady {
			continue
		}
		if old.Status == status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		node.Status.Conditions[i], found = c, true
	}
	if !found {
		node.Status.Conditions = append(node.Status.Conditions, c)
	}
	if err := h.Client.Status().Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("patch node status: %w", err)
	}
	return nil
}
