package evacuation_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/prereq"
)

// pdbVMI is a VMI running on node with strategy ("" for none) and the IsMigratable condition.
func pdbVMI(name, node string, strategy vmletv1.EvictionStrategy, migratable bool) *vmletv1.VirtualMachineInstance {
	v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	if strategy != "" {
		v.Spec.EvictionStrategy = ptr.To(strategy)
	}
	st, reason := metav1.ConditionTrue, migration.ReasonMigratable
	if !migratable {
		st, reason = metav1.ConditionFalse, migration.ReasonInterfaceNotMigratable
	}
	v.Status.NodeName, v.Status.Phase = node, vmletv1.Running
	v.Status.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceIsMigratable, Status: st, Reason: reason,
		Message: "test", LastTransitionTime: metav1.Now()}}
	return v
}

// TestWantsPDB: a PodDisruptionBudget exactly where the eviction webhook would refuse, so that
// the refusal holds while the webhook is down; minAvailable 2 while a migration runs.
func TestWantsPDB(t *testing.T) {
	lm, ifp := vmletv1.EvictionStrategyLiveMigrate, vmletv1.EvictionStrategyLiveMigrateIfPossible
	none, ext := vmletv1.EvictionStrategyNone, vmletv1.EvictionStrategyExternal
	pending := pdbVMI("pending", "", lm, true)
	pending.Status.Phase = vmletv1.Scheduling
	ended := pdbVMI("ended", "n1", lm, true)
	ended.Status.Phase = vmletv1.Succeeded
	deleting := pdbVMI("deleting", "n1", lm, true)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, c := range []struct {
		name string
		vmi  *vmletv1.VirtualMachineInstance
		def  *vmletv1.EvictionStrategy
		want bool
	}{
		{"LiveMigrate", pdbVMI("a", "n1", lm, true), nil, true},
		{"LiveMigrate, not migratable: the drain must wait", pdbVMI("a", "n1", lm, false), nil, true},
		{"LiveMigrateIfPossible", pdbVMI("a", "n1", ifp, true), nil, true},
		{"LiveMigrateIfPossible, not migratable: evicted", pdbVMI("a", "n1", ifp, false), nil, false},
		{"External", pdbVMI("a", "n1", ext, false), nil, true},
		{"None", pdbVMI("a", "n1", none, true), nil, false},
		{"unset, cluster default LiveMigrate", pdbVMI("a", "n1", "", true), &lm, true},
		{"unset, cluster default None", pdbVMI("a", "n1", "", true), &none, false},
		{"not on a node yet", pending, nil, false},
		{"ended", ended, nil, false},
		{"being deleted", deleting, nil, false},
	} {
		if got := evacuation.WantsPDB(c.vmi, c.def); got != c.want {
			t.Errorf("%s: WantsPDB %v, want %v", c.name, got, c.want)
		}
	}

	v := pdbVMI("a", "n1", lm, true)
	p := evacuation.PDB(v)
	if p.Spec.MinAvailable.IntValue() != 1 || p.Spec.Selector.MatchLabels[launcherpod.LabelVMIUID] != string(v.UID) ||
		len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Name != v.Name || p.Name != evacuation.PDBName(v) {
		t.Errorf("PDB of a running VMI: %+v", p)
	}
	v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetNode: "n2"}
	if got := evacuation.PDB(v).Spec.MinAvailable.IntValue(); got != 2 {
		t.Errorf("PDB while migrating: minAvailable %d, want 2 (source and target pod)", got)
	}
	v.Status.MigrationState.Completed = true
	if got := evacuation.PDB(v).Spec.MinAvailable.IntValue(); got != 1 {
		t.Errorf("PDB after the migration: minAvailable %d, want 1", got)
	}
}

// TestControllerPDBs: with PDBs on, each pass makes, raises, lowers and deletes the VMIs'
// PodDisruptionBudgets in a real API server as WantsPDB and PDB say.
func TestControllerPDBs(t *testing.T) {
	prereq.APIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	ec := &evacuation.Controller{Client: c, APIReader: c, Recorder: events.NewFakeRecorder(100), PDBs: true}
	const node = "pdb-node"
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	// The cluster's configuration as vmlet installs it (another test may have left it invalid).
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: migration.ConfigNamespace}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: migration.ConfigNamespace, Name: migration.ConfigName}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, cm, func() error {
		cm.Data = map[string]string{evacuation.ConfigKey: string(vmletv1.EvictionStrategyLiveMigrate)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, strategy vmletv1.EvictionStrategy) *vmletv1.VirtualMachineInstance {
		t.Helper()
		want := pdbVMI(name, node, strategy, true)
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: want.Spec}
		q := resource.MustParse("128Mi")
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: &q}
		if err := c.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		v.Status = want.Status
		if err := c.Status().Update(ctx, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	kept, none := mk("pdb-kept", vmletv1.EvictionStrategyLiveMigrate), mk("pdb-none", vmletv1.EvictionStrategyNone)
	reconcile := func() {
		t.Helper()
		if _, err := ec.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: node}}); err != nil {
			t.Fatalf("reconcile: %v", err)
		}
	}
	pdbOf := func(v *vmletv1.VirtualMachineInstance) *policyv1.PodDisruptionBudget {
		t.Helper()
		p := &policyv1.PodDisruptionBudget{}
		err := c.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: evacuation.PDBName(v)}, p)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	setStatus := func(v *vmletv1.VirtualMachineInstance, change func(*vmletv1.VirtualMachineInstance)) {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(v), v); err != nil {
			t.Fatal(err)
		}
		change(v)
		if err := c.Status().Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}

	reconcile()
	if p := pdbOf(kept); p == nil || p.Spec.MinAvailable.IntValue() != 1 || p.OwnerReferences[0].UID != kept.UID {
		t.Fatalf("PodDisruptionBudget of the LiveMigrate VMI: %+v", p)
	}
	if p := pdbOf(none); p != nil {
		t.Errorf("PodDisruptionBudget for evictionStrategy None: %+v", p)
	}
	setStatus(kept, func(v *vmletv1.VirtualMachineInstance) {
		v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "m1", TargetNode: "other"}
	})
	reconcile()
	if p := pdbOf(kept); p == nil || p.Spec.MinAvailable.IntValue() != 2 {
		t.Fatalf("PodDisruptionBudget while migrating: %+v, want minAvailable 2", p)
	}
	setStatus(kept, func(v *vmletv1.VirtualMachineInstance) { v.Status.MigrationState.Completed = true })
	reconcile()
	if p := pdbOf(kept); p == nil || p.Spec.MinAvailable.IntValue() != 1 {
		t.Fatalf("PodDisruptionBudget after the migration: %+v, want minAvailable 1", p)
	}
	setStatus(kept, func(v *vmletv1.VirtualMachineInstance) { v.Status.Phase = vmletv1.Succeeded })
	reconcile()
	if p := pdbOf(kept); p != nil {
		t.Errorf("PodDisruptionBudget of an ended VMI: %+v, want none", p)
	}
}
