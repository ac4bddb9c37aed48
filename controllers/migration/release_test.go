package migration_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestReleaseKeepsCompletedTarget: a migration deleted right after it completed (its phase not
// yet Succeeded, the controller's cached vmi still on the source node) must not delete its
// target pod, which runs the guest now; the API server's vmi says the migration completed.
// Found on the real cluster: a VMIM deleted at once after the VMI showed the migration done
// took the VMI down (LauncherPodDeleted). A migration that failed has its target pod deleted.
func TestReleaseKeepsCompletedTarget(t *testing.T) {
	prereq.APIServer(t)
	env := apienv.StartT(t, apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "release"}}); err != nil {
		t.Fatal(err)
	}
	vmi := migratingVMI()
	vmi.Namespace, vmi.UID = "release", ""
	status := vmi.Status
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "release", Name: "m", UID: "mig-uid"}}
	m.Status.Phase = vmletv1.MigrationRunning
	stale := vmi.DeepCopy() // what the controller's cache held: on node-a, no migrationState
	stale.Status = status

	target, err := launcherpod.Build(vmi, podOpts, nil)
	if err != nil {
		t.Fatal(err)
	}
	target.Labels[launcherpod.LabelMigrationUID], target.Labels[launcherpod.LabelMigrationRole] = string(m.UID), launcherpod.MigrationRoleTarget
	target.Spec.NodeName = "node-b"
	if err := env.Client.Create(ctx, target); err != nil {
		t.Fatal(err)
	}
	tp := &migration.TargetPods{Client: env.Client, APIReader: env.Client, Pods: podOpts}
	deleting := func() bool {
		p := &corev1.Pod{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(target), p)
		return err != nil || !p.DeletionTimestamp.IsZero()
	}

	// The nodes wrote the switchover: the guest runs on node-b in the target pod.
	now := metav1.Now()
	vmi.Status = status
	vmi.Status.NodeName = "node-b"
	vmi.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: m.UID, Completed: true, EndTimestamp: &now,
		SourceNode: "node-a", TargetNode: "node-b", TargetPod: target.Name}
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if err := tp.Release(ctx, m, stale); err != nil {
		t.Fatal(err)
	}
	if deleting() {
		t.Fatal("the completed migration's target pod (the guest's now) was deleted")
	}
	m.Status.Phase = vmletv1.MigrationSucceeded
	if err := tp.Release(ctx, m, nil); err != nil || deleting() {
		t.Fatalf("Release of a Succeeded migration: %v, pod deleted %v", err, deleting())
	}

	// A failed migration's target pod goes.
	m.Status.Phase = vmletv1.MigrationFailed
	vmi.Status.NodeName = "node-a"
	vmi.Status.MigrationState.Completed, vmi.Status.MigrationState.Failed = false, true
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if err := tp.Release(ctx, m, stale); err != nil {
		t.Fatal(err)
	}
	if !deleting() {
		t.Error("the failed migration's target pod was kept")
	}
}
