package evacuation

import (
	"context"
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;create;update;delete

// PDBName is the name of vmi's PodDisruptionBudget (one per VMI, by UID: a VMI of the same name
// made again gets its own).
func PDBName(vmi *vmletv1.VirtualMachineInstance) string { return "vmlet-vmi-" + string(vmi.UID) }

// WantsPDB reports whether vmi's launcher pods need a PodDisruptionBudget: whenever the
// eviction webhook would refuse their eviction (Eviction), so that an eviction is refused even
// while the webhook is down (it fails open): a running VMI with evictionStrategy LiveMigrate or
// External, or LiveMigrateIfPossible and migratable (def: the cluster's strategy). Pure.
func WantsPDB(vmi *vmletv1.VirtualMachineInstance, def *vmletv1.EvictionStrategy) bool {
	if vmi.Status.NodeName == "" || vmistatus.IsFinal(vmi.Status.Phase) || !vmi.DeletionTimestamp.IsZero() {
		return false
	}
	switch Strategy(vmi, def) {
	case vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyExternal:
		return true
	case vmletv1.EvictionStrategyLiveMigrateIfPossible:
		ok, _ := Migratable(vmi)
		return ok
	}
	return false
}

// PDB is vmi's PodDisruptionBudget (KubeVirt's): its launcher pods (label
// launcherpod.LabelVMIUID) with minAvailable 1, 2 while it migrates (source and target pod
// both kept); owned by the VMI. Pure.
func PDB(vmi *vmletv1.VirtualMachineInstance) *policyv1.PodDisruptionBudget {
	minAvailable := intstr.FromInt32(1)
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationUID != "" && !ms.Completed && !ms.Failed {
		minAvailable = intstr.FromInt32(2)
	}
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: vmi.Namespace, Name: PDBName(vmi),
			Labels:          map[string]string{launcherpod.LabelVMIUID: string(vmi.UID)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(vmi, vmletv1.GroupVersion.WithKind("VirtualMachineInstance"))}},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &minAvailable,
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{launcherpod.LabelVMIUID: string(vmi.UID)}},
		},
	}
}

// syncPDB makes, updates or deletes vmi's PodDisruptionBudget as WantsPDB and PDB say.
func (c *Controller) syncPDB(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, def *vmletv1.EvictionStrategy) error {
	want := PDB(vmi)
	have := &policyv1.PodDisruptionBudget{}
	err := c.reader().Get(ctx, client.ObjectKeyFromObject(want), have)
	switch {
	case apierrors.IsNotFound(err):
		if !WantsPDB(vmi, def) {
			return nil
		}
		if err := c.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create the PodDisruptionBudget of vmi %s: %w", vmi.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("read the PodDisruptionBudget of vmi %s: %w", vmi.Name, err)
	case !WantsPDB(vmi, def):
		if err := c.Client.Delete(ctx, have, client.Preconditions{UID: &have.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete the PodDisruptionBudget of vmi %s: %w", vmi.Name, err)
		}
		return nil
	case have.Spec.MinAvailable != nil && *have.Spec.MinAvailable == *want.Spec.MinAvailable:
		return nil
	}
	have.Spec.MinAvailable = want.Spec.MinAvailable
	if err := c.Client.Update(ctx, have); err != nil {
		return fmt.Errorf("update the PodDisruptionBudget of vmi %s: %w", vmi.Name, err)
	}
	return nil
}
