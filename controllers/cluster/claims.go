package cluster

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get;list;watch

// claims resolves the claims of the VMI's volumes (launcherpod.ClaimUses) through the API:
// each PersistentVolumeClaim and the PersistentVolume it is bound to. The first claim that
// cannot be mounted yet is returned as a problem (nothing else is wrong: the VMI waits).
func (r *Reconciler) claims(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, o launcherpod.Options) ([]launcherpod.Claim, *launcherpod.ClaimProblem, error) {
	var out []launcherpod.Claim
	for _, use := range launcherpod.ClaimUses(vmi) {
		c, problem, err := r.resolveClaim(ctx, vmi.Namespace, use, o)
		if err != nil || problem != nil {
			return nil, problem, err
		}
		out = append(out, c)
	}
	return out, nil, nil
}

// waitForClaim keeps the VMI Pending, saying why (Synchronized=False with the problem's
// reason, as KubeVirt's virt-controller) and, when that is news, in an Event: Normal while the
// claim may still appear or bind, Warning when its volume cannot be used. A change of the
// claim or its volume wakes the VMI (watchClaims).
func (r *Reconciler) waitForClaim(vmi *vmletv1.VirtualMachineInstance, p *launcherpod.ClaimProblem) {
	c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	if c == nil || c.Reason != p.Reason || c.Message != p.Message {
		typ := corev1.EventTypeNormal
		if p.Reason == launcherpod.ReasonPVCNotSupported {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(vmi, nil, typ, p.Reason, "ResolveClaim", "%s", p.Message)
	}
	vmistatus.SetPhase(vmi, vmletv1.Pending)
	vmistatus.NotSynchronized(vmi, vmistatus.Reason(p.Reason), p.Message)
}

// clearClaimWait removes the VMI's Synchronized condition if it is a claim problem's (the
// claims resolved).
func clearClaimWait(vmi *vmletv1.VirtualMachineInstance) {
	c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	if c == nil {
		return
	}
	switch c.Reason {
	case launcherpod.ReasonPVCNotFound, launcherpod.ReasonPVCNotReady, launcherpod.ReasonPVCNotSupported:
		meta.RemoveStatusCondition(&vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	}
}

// vmisUsingClaim maps a PersistentVolumeClaim (or a PersistentVolume, through its claimRef) to
// the VMIs of its namespace that use it: those without a node yet (waiting for their launcher
// pod's claims), and running ones that hot-plug it (waiting for their attachment pod).
func (r *Reconciler) vmisUsingClaim(ctx context.Context, obj client.Object) []reconcile.Request {
	ns, name := obj.GetNamespace(), obj.GetName()
	if pv, ok := obj.(*corev1.PersistentVolume); ok {
		if pv.Spec.ClaimRef == nil {
			return nil
		}
		ns, name = pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name
	}
	var list vmletv1.VirtualMachineInstanceList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		vmi := &list.Items[i]
		if vmistatus.IsFinal(vmi.Status.Phase) {
			continue
		}
		uses := launcherpod.ClaimUses(vmi)
		if vmi.Status.NodeName != "" {
			uses = nil
			for _, u := range launcherpod.HotplugClaimUses(vmi) {
				uses = append(uses, u.ClaimUse)
			}
		}
		for _, u := range uses {
			if u.Name == name {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: vmi.Name}})
				break
			}
		}
	}
	return out
}
