package clustere2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
)

// TestClusterMigrationFaults: a migration whose addedNodeSelector no node matches waits in
// Scheduling with the scheduler's message and its target pod goes with it; a cluster-mode
// migration slowed to 1 MiB/s is (1) aborted by deleting its VirtualMachineInstanceMigration,
// and (2) failed by killing its target launcher pod's processes mid-stream. Each time the guest keeps running on its node (Ready, its counter
// counting), the migration says why it ended, the target launcher pod is deleted and the
// target node keeps nothing of the VMI.
func TestClusterMigrationFaults(t *testing.T) {
	c := startClusterWith(t, clusterOptions{nodes: 2})
	ctx := context.Background()
	cl := c.env.Client
	second := c.others[0]
	setMigrationConfig(t, "bandwidthPerMigration: 1Mi\n")
	vmi := guestvmi.VMI("faults", guestImage)
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
		InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
	vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	if err := cl.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	t.Cleanup(func() { _ = cl.Delete(context.Background(), vmi) })
	ready := c.waitVMI(t, key, 3*time.Minute, "Ready with its guest agent", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	c.guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &")
	sourcePod := c.launcherPod(t, string(vmi.UID))

	// streaming starts migration name and waits until the stream flows; it returns the
	// migration and its target launcher pod.
	streaming := func(t *testing.T, name string) (*vmletv1.VirtualMachineInstanceMigration, *corev1.Pod) {
		t.Helper()
		m := &vmletv1.VirtualMachineInstanceMigration{}
		m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, name, vmi.Name
		if err := cl.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), m) }) // finished migrations are kept
		v := c.waitVMI(t, key, 2*time.Minute, "streaming to "+second.name, func(v *vmletv1.VirtualMachineInstance) bool {
			ms := v.Status.MigrationState
			return ms != nil && ms.MigrationUID == m.UID && ms.Progress != nil && ms.Progress.DataProcessedBytes > 0 && !ms.Completed && !ms.Failed
		})
		pod := &corev1.Pod{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: vmi.Namespace, Name: v.Status.MigrationState.TargetPod}, pod); err != nil {
			t.Fatalf("target pod %q: %v", v.Status.MigrationState.TargetPod, err)
		}
		if pod.Spec.NodeName != second.name {
			t.Fatalf("target pod %s on %q, want %s", pod.Name, pod.Spec.NodeName, second.name)
		}
		return m, pod
	}
	// stays checks that the guest still runs where it was, counting, its source pod its
	// launcher, and that the target pod and everything of the vmi on the second node are gone.
	stays := func(t *testing.T, target *corev1.Pod) {
		t.Helper()
		v := c.waitVMI(t, key, time.Minute, "Ready on "+nodeName, func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.NodeName == nodeName && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
		})
		if v.Status.Phase != vmletv1.Running || v.Status.Launcher == nil || v.Status.Launcher.Pod != sourcePod.Name {
			t.Errorf("vmi %s, launcher %+v; want Running in %s", v.Status.Phase, v.Status.Launcher, sourcePod.Name)
		}
		before := c.guestCount(t, v)
		poll.Until(t, 30*time.Second, "the counter counting on "+nodeName, func() (bool, string) {
			n := c.guestCount(t, v)
			return n > before, fmt.Sprintf("count %d, was %d", n, before)
		})
		c.waitNodeClean(t, second.name, vmi, target)
	}

	t.Run("an addedNodeSelector no node matches", func(t *testing.T) {
		m := &vmletv1.VirtualMachineInstanceMigration{}
		m.Namespace, m.Name, m.Spec.VMIName = vmi.Namespace, "nowhere", vmi.Name
		m.Spec.AddedNodeSelector = map[string]string{"example.com/rack": "nowhere"}
		if err := cl.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), m) })
		poll.Until(t, time.Minute, "the scheduler's word in TargetScheduled", func() (bool, string) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(m.Status.Conditions, "TargetScheduled")
			return m.Status.Phase == vmletv1.MigrationScheduling && c != nil && c.Status == "False" && strings.Contains(c.Message, "node affinity/selector"),
				fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
		})
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.MatchingLabels{launcherpod.LabelMigrationUID: string(m.UID)}); err != nil || len(pods.Items) != 1 {
			t.Fatalf("target pods: %d, %v; want 1", len(pods.Items), err)
		}
		if got := pods.Items[0].Spec.NodeSelector["example.com/rack"]; got != "nowhere" {
			t.Errorf("target pod nodeSelector %v, want the added example.com/rack=nowhere", pods.Items[0].Spec.NodeSelector)
		}
		if err := cl.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
		target := pods.Items[0]
		poll.Until(t, time.Minute, "target pod deleted", func() (bool, string) {
			err := cl.Get(ctx, client.ObjectKeyFromObject(&target), &corev1.Pod{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
	})

	t.Run("deleting the migration aborts it", func(t *testing.T) {
		m, target := streaming(t, "aborted")
		if err := cl.Delete(ctx, m); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 2*time.Minute, "migration aborted and gone", func() (bool, string) {
			err := cl.Get(ctx, client.ObjectKeyFromObject(m), &vmletv1.VirtualMachineInstanceMigration{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		v := &vmletv1.VirtualMachineInstance{}
		if err := cl.Get(ctx, key, v); err != nil {
			t.Fatal(err)
		}
		if ms := v.Status.MigrationState; ms == nil || !ms.AbortRequested || ms.AbortStatus != vmletv1.MigrationAbortSucceeded || ms.Completed {
			t.Errorf("migrationState after the abort: %+v", ms)
		}
		stays(t, target)
	})

	t.Run("the target launcher is killed", func(t *testing.T) {
		m, target := streaming(t, "killed")
		procs := filepath.Join(second.podCgroups, "pod-"+string(target.UID), "cgroup.procs")
		b, err := os.ReadFile(procs)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		poll.Until(t, 2*time.Minute, "migration Failed", func() (bool, string) {
			if err := cl.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return false, err.Error()
			}
			return m.Status.Phase == vmletv1.MigrationFailed, string(m.Status.Phase)
		})
		if ms := m.Status.MigrationState; ms == nil || !ms.Failed || !strings.Contains(ms.FailureReason, "target launcher") {
			t.Errorf("migrationState: %+v; want failed, the reason naming the target", ms)
		} else {
			t.Logf("failure reason: %s", ms.FailureReason)
		}
		stays(t, target)
	})

	if err := cl.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, "VMI gone", func() (bool, string) {
		err := cl.Get(ctx, key, &vmletv1.VirtualMachineInstance{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	c.waitNodeClean(t, nodeName, vmi, sourcePod)
	c.waitNodeClean(t, second.name, vmi, nil)
}

// setMigrationConfig writes the cluster's migration configuration (the ConfigMap vmlet
// controller reads when it schedules a migration) for this test, and removes it after.
func setMigrationConfig(t *testing.T, doc string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{}
	ns.Name = migration.ConfigNamespace
	if err := env.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = migration.ConfigNamespace, migration.ConfigName
	cm.Data = map[string]string{migration.ConfigKey: doc}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
}
