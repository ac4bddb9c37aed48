package podruntime

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// Claims returns the claims VMI id's launcher pod mounts (launcherpod.AnnotClaims), where the
// pod mounts them: at their node paths, so the storage the agent prepares on the node is what
// QEMU opens in the container; then the claims of its attachment pods that run on this node
// (hot-plugged volumes: the agent opens their disks and hands the files to the launcher).
// controllers.ErrClaimsUnknown while the launcher pod is not in the cache.
func (r *Runtime) Claims(ctx context.Context, id string) ([]launcherpod.Claim, error) {
	pod, err := r.pod(ctx, id)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("launcher of %s: %w", id, controllers.ErrClaimsUnknown)
	}
	claims, err := launcherpod.PodClaims(pod)
	if err != nil {
		return nil, err
	}
	att, err := r.attachments(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range att {
		if !launcherpod.AttachmentReady(&att[i]) {
			continue
		}
		c, err := launcherpod.PodClaims(&att[i])
		if err != nil {
			return nil, err
		}
		claims = append(claims, c...)
	}
	return claims, nil
}

// AttachmentWait says what a hot-plugged volume of VMI id waits for on this node: its
// attachment pod, not running here yet (with the kubelet's words), or not on this node at all
// (not made yet: its claim is not bound, or not scheduled: the agent's cache holds this node's
// pods only, so the message names the label that finds it).
func (r *Runtime) AttachmentWait(ctx context.Context, id, volume string) string {
	att, err := r.attachments(ctx, id)
	if err != nil {
		return err.Error()
	}
	for i := range att {
		p := &att[i]
		if launcherpod.AttachmentVolume(p) != volume || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if launcherpod.AttachmentReady(p) {
			return ""
		}
		msg := fmt.Sprintf("waiting for attachment pod %s (%s)", p.Name, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Status == corev1.ConditionFalse && c.Message != "" {
				msg += fmt.Sprintf(": %s: %s", c.Reason, c.Message)
				break
			}
		}
		return msg
	}
	return fmt.Sprintf("waiting for its attachment pod to run on this node (the cluster controller makes it once the claim is bound to a local or hostPath volume; pods -l %s=%s)", launcherpod.LabelAttachmentFor, id)
}

// attachments are VMI id's attachment pods on this node (the cache holds this node's only).
func (r *Runtime) attachments(ctx context.Context, id string) ([]corev1.Pod, error) {
	var l corev1.PodList
	if err := r.Pods.List(ctx, &l, client.MatchingLabels(launcherpod.MatchingAttachments(types.UID(id)))); err != nil {
		return nil, fmt.Errorf("list attachment pods: %w", err)
	}
	return l.Items, nil
}
