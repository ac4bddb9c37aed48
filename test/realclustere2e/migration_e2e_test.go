package realclustere2e_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/migrationca"
	"github.com/vmlet/vmlet/test/poll"
)

// TestMigrationOnOneNode: on this one-node cluster a live migration has nowhere to go. `kubectl
// create` of a VirtualMachineInstanceMigration gets a target launcher pod that the real
// kube-scheduler keeps off the source node (it says so: the migration's TargetScheduled
// condition carries its message), the deployed controller made the migration CA Secret (its
// RBAC allows it), and deleting the migration removes the target pod while the guest runs on.
func TestMigrationOnOneNode(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "migr", masqueradeSpec)
	ctx := context.Background()
	if err := kc.Get(ctx, client.ObjectKey{Namespace: migrationca.Namespace, Name: migrationca.SecretName}, &corev1.Secret{}); err != nil {
		t.Errorf("migration CA Secret %s/%s: %v", migrationca.Namespace, migrationca.SecretName, err)
	}
	waitVMI(t, b.name, time.Minute, "LiveMigratable", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, string(vmletv1.VirtualMachineInstanceIsMigratable))
	})
	name := b.name + "-m"
	kubectl(t, "apiVersion: vmlet.dev/v1alpha1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: "+name+
		"\n  namespace: default\nspec:\n  vmiName: "+b.name+"\n", "create", "-f", "-")
	key := client.ObjectKey{Namespace: "default", Name: name}
	m := &vmletv1.VirtualMachineInstanceMigration{}
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: objMeta(name)})
	})
	poll.Until(t, 2*time.Minute, name+": the scheduler's word on its target", func() (bool, string) {
		if err := kc.Get(ctx, key, m); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, "TargetScheduled")
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "node affinity"), fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
	})
	var pods corev1.PodList
	if err := kc.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{launcherpod.LabelMigrationUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "" || pods.Items[0].Name == b.pod.Name {
		t.Fatalf("target pods %+v, want one pending", pods.Items)
	}
	target := pods.Items[0]
	if got := m.Status.Phase; got != vmletv1.MigrationScheduling {
		t.Errorf("phase %s, want %s (kept until %s)", got, vmletv1.MigrationScheduling, migration.SchedulingTimeout)
	}
	kubectl(t, "", "delete", "vmim", name, "-n", "default", "--wait", "--timeout=2m")
	poll.Until(t, time.Minute, "target pod "+target.Name+" deleted", func() (bool, string) {
		err := kc.Get(ctx, client.ObjectKeyFromObject(&target), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	v := getVMI(t, b.name)
	if v.Status.Phase != vmletv1.Running || v.Status.NodeName != cl.NodeName || v.Status.Launcher == nil || v.Status.Launcher.Pod != b.pod.Name {
		t.Errorf("after the migration's deletion: %s, launcher %+v", summary(v), v.Status.Launcher)
	}
	deleteVMI(t, b.name)
	assertGone(t, b.fp)
}
