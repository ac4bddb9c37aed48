package cluster

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// attach keeps one attachment pod (launcherpod.BuildAttachment) for each hotpluggable claim
// volume of a VMI whose launcher pod runs on a node, unless that pod mounts the claim itself (a
// migration target's pod mounts the source's hot-plugged claims: migration.TargetPod): it makes
// the missing ones once their claim resolves, and deletes those whose volume left the spec, that
// ended, or that are on another node (the VMI migrated). The node agent plugs a volume once its
// pod runs and unplugs a disk whose volume left the spec; the disk stays open in QEMU when its
// pod goes (QEMU holds the files the agent handed over), so the two need no ordering.
func (r *Reconciler) attach(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, pod *corev1.Pod) error {
	node := pod.Spec.NodeName
	mounted := map[string]bool{}
	claims, err := launcherpod.PodClaims(pod)
	if err != nil {
		return err
	}
	for _, c := range claims {
		mounted[c.ClaimName] = true
	}
	want := map[string]launcherpod.VolumeClaimUse{}
	for _, u := range launcherpod.HotplugClaimUses(vmi) {
		if !mounted[u.Name] {
			want[u.Volume] = u
		}
	}
	pods, err := r.attachmentPods(ctx, vmi, r.Client)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	var stale []corev1.Pod
	for _, p := range pods {
		vol := launcherpod.AttachmentVolume(&p)
		_, wanted := want[vol]
		ended := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
		elsewhere := p.Spec.NodeName != "" && p.Spec.NodeName != node
		switch {
		case !p.DeletionTimestamp.IsZero():
			have[vol] = true // made again once it is gone
		case !wanted || ended || elsewhere || have[vol]:
			stale = append(stale, p)
			have[vol] = have[vol] || (wanted && !ended && !elsewhere)
		default:
			have[vol] = true
		}
	}
	var errs []error
	for i := range stale {
		p := &stale[i]
		if err := deletePod(ctx, r.Client, p); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Recorder.Eventf(vmi, p, corev1.EventTypeNormal, string(vmistatus.ReasonSuccessfulDelete), "DeletePod",
			"deleted attachment pod %s of volume %s", p.Name, launcherpod.AttachmentVolume(p))
	}
	missing := false
	for vol := range want {
		missing = missing || !have[vol]
	}
	if !missing {
		return errors.Join(errs...)
	}
	// The cache may not hold a pod the previous pass made: ask the API server before making
	// another.
	live, err := r.attachmentPods(ctx, vmi, r.APIReader)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, p := range live {
		if p.DeletionTimestamp.IsZero() && (p.Spec.NodeName == "" || p.Spec.NodeName == node) {
			have[launcherpod.AttachmentVolume(&p)] = true
		}
	}
	for _, u := range launcherpod.HotplugClaimUses(vmi) {
		if _, wanted := want[u.Volume]; !wanted || have[u.Volume] {
			continue
		}
		have[u.Volume] = true
		if err := r.makeAttachment(ctx, vmi, u, node); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// makeAttachment makes the attachment pod of one volume on node, once its claim resolves
// (until then an Event says why, with KubeVirt's claim reasons, and the node agent reports the
// volume Pending, waiting for its pod; a change of the claim wakes the VMI).
func (r *Reconciler) makeAttachment(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, u launcherpod.VolumeClaimUse, node string) error {
	c, problem, err := r.resolveClaim(ctx, vmi.Namespace, u.ClaimUse, r.Pods)
	if err != nil {
		return err
	}
	if problem != nil {
		// The agent reports the volume Pending (AttachmentPodPending); what it waits for is
		// known here (repeated Events are aggregated by the recorder).
		typ := corev1.EventTypeNormal
		if problem.Reason == launcherpod.ReasonPVCNotSupported {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(vmi, nil, typ, problem.Reason, "ResolveClaim", "volume %s: %s", u.Volume, problem.Message)
		return nil
	}
	pod, err := launcherpod.BuildAttachment(vmi, u.Volume, node, c, r.Pods)
	if err != nil {
		return err
	}
	if err := r.Client.Create(ctx, pod); err != nil {
		return fmt.Errorf("create attachment pod of volume %s: %w", u.Volume, err)
	}
	r.Recorder.Eventf(vmi, pod, corev1.EventTypeNormal, string(vmistatus.ReasonSuccessfulCreate), "CreatePod",
		"created attachment pod %s for volume %s (claim %s) on node %s", pod.Name, u.Volume, u.Name, node)
	return nil
}

// deleteAttachments deletes all of the VMI's attachment pods (it ended or is being deleted).
func (r *Reconciler) deleteAttachments(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	pods, err := r.attachmentPods(ctx, vmi, r.Client)
	if err != nil {
		return err
	}
	var errs []error
	for i := range pods {
		if p := &pods[i]; p.DeletionTimestamp.IsZero() {
			errs = append(errs, deletePod(ctx, r.Client, p))
		}
	}
	return errors.Join(errs...)
}

func (r *Reconciler) attachmentPods(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, reader client.Reader) ([]corev1.Pod, error) {
	list := &corev1.PodList{}
	if err := reader.List(ctx, list, client.InNamespace(vmi.Namespace), client.MatchingLabels(launcherpod.MatchingAttachments(vmi.UID))); err != nil {
		return nil, fmt.Errorf("list attachment pods: %w", err)
	}
	return list.Items, nil
}

// resolveClaim resolves one claim of namespace through the API (the claim, then its volume).
func (r *Reconciler) resolveClaim(ctx context.Context, namespace string, use launcherpod.ClaimUse, o launcherpod.Options) (launcherpod.Claim, *launcherpod.ClaimProblem, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: use.Name}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		pvc = nil
	case err != nil:
		return launcherpod.Claim{}, nil, fmt.Errorf("read PVC %s/%s: %w", namespace, use.Name, err)
	}
	var pv *corev1.PersistentVolume
	if pvc != nil && pvc.Spec.VolumeName != "" {
		pv = &corev1.PersistentVolume{}
		err := r.Client.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv)
		switch {
		case apierrors.IsNotFound(err):
			pv = nil
		case err != nil:
			return launcherpod.Claim{}, nil, fmt.Errorf("read PersistentVolume %s: %w", pvc.Spec.VolumeName, err)
		}
	}
	c, problem := launcherpod.ResolveClaim(use, namespace, pvc, pv, o)
	return c, problem, nil
}
