package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/cluster"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
)

// startMigrationController runs cluster mode's migration controller (target launcher pods,
// the launcher pod options of the cluster controller) in a manager of its own until the test
// ends.
func startMigrationController(t *testing.T) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, manager.Options{
		Scheme: env.Scheme, Cache: cluster.CacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	tp := &migration.TargetPods{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pods: testPods}
	mc := &migration.Controller{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(),
		Recorder: mgr.GetEventRecorder(fmt.Sprintf("vmlet-migration-%d", managers.Add(1))), Pick: tp.Pick, Pods: tp}
	if err := mc.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("migration manager: %v", err)
		}
	})
}

// agentWrites changes the VMI's status as a node agent would (read, change, write; again on a
// conflict with the controller).
func agentWrites(t *testing.T, vmi *vmletv1.VirtualMachineInstance, change func(*vmletv1.VirtualMachineInstance)) {
	t.Helper()
	for {
		v := getVMI(t, vmi)
		change(v)
		err := env.Client.Status().Update(context.Background(), v)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
}

// kubeletWrites sets the launcher pod's phase and its container's end as a kubelet does.
func kubeletWrites(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, exit int32) {
	t.Helper()
	p := getPod(t, pod)
	p.Status.Phase = phase
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: launcherpod.ContainerName, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, StartedAt: metav1.Now(), FinishedAt: metav1.Now()}},
	}}
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func getPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func getMigration(t *testing.T, m *vmletv1.VirtualMachineInstanceMigration) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	got := &vmletv1.VirtualMachineInstanceMigration{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(m), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// waitTargetPod waits for the migration's one target pod.
func waitTargetPod(t *testing.T, m *vmletv1.VirtualMachineInstanceMigration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, m.Name+" target pod", func() (bool, string) {
		var l corev1.PodList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(m.Namespace),
			client.MatchingLabels{launcherpod.LabelMigrationUID: string(m.UID)}); err != nil {
			return false, err.Error()
		}
		if len(l.Items) > 1 {
			t.Fatalf("%d target pods for %s", len(l.Items), m.Name)
		}
		if len(l.Items) == 1 {
			pod = &l.Items[0]
		}
		return pod != nil, "none"
	})
	return pod
}

// migrating is a VMI Running on node-a in its launcher pod (source) and a migration m of it
// whose target pod (target) is unbound.
type migrating struct {
	vmi            *vmletv1.VirtualMachineInstance
	source, target *corev1.Pod
	m              *vmletv1.VirtualMachineInstanceMigration
}

func startMigration(t *testing.T, name string) migrating {
	t.Helper()
	startController(t)
	startMigrationController(t)
	var s migrating
	s.vmi = newVMI(t, namespace(t), name, func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.NodeSelector = map[string]string{"zone": "a"}
		v.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false) // migratable: no bridge on the pod network
	})
	s.source = runningOn(t, s.vmi, "node-a")
	agentWrites(t, s.vmi, func(v *vmletv1.VirtualMachineInstance) { v.Status.SelinuxContext = "none" })
	s.m = &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: s.vmi.Namespace, Name: name + "-migration"}}
	s.m.Spec.VMIName = s.vmi.Name
	if err := env.Client.Create(context.Background(), s.m); err != nil {
		t.Fatal(err)
	}
	s.target = waitTargetPod(t, s.m)
	return s
}

// bound binds the target pod to node-b and waits for the migration to be handed to the nodes.
func (s *migrating) bound(t *testing.T) {
	t.Helper()
	bind(t, s.target, "node-b")
	eventually(t, "migration scheduled", func() (bool, string) {
		s.m = getMigration(t, s.m)
		return s.m.Status.Phase == vmletv1.MigrationScheduled, string(s.m.Status.Phase)
	})
	v := getVMI(t, s.vmi)
	if ms := v.Status.MigrationState; ms == nil || ms.TargetNode != "node-b" || ms.TargetPod != s.target.Name || ms.SourcePod != s.source.Name {
		t.Fatalf("migrationState %+v: want %s on node-b, from %s", ms, s.target.Name, s.source.Name)
	}
	if v.Labels[migration.LabelSourceNode] != "node-a" || v.Labels[migration.LabelTargetNode] != "node-b" {
		t.Errorf("vmi labels %v: want the migration's nodes for the agents", v.Labels)
	}
}

// stays checks for d that the VMI keeps running on node in pod, and that none of keep is
// deleted.
func (s *migrating) stays(t *testing.T, d time.Duration, node string, pod *corev1.Pod, keep ...*corev1.Pod) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		v := getVMI(t, s.vmi)
		if v.Status.Phase != vmletv1.Running || v.Status.NodeName != node || v.Status.Launcher == nil || v.Status.Launcher.Pod != pod.Name {
			t.Fatalf("vmi: %s, launcher %+v; want Running on %s in %s", summary(v), v.Status.Launcher, node, pod.Name)
		}
		for _, k := range append(keep, pod) {
			if p := getPod(t, k); !p.DeletionTimestamp.IsZero() {
				t.Fatalf("pod %s deleted", p.Name)
			}
		}
	}
}

// TestMigrationTargetPod: a migration gets a target launcher pod of the VMI (owned by it, the
// migration's labels, kept off node-a, the VMI's nodeSelector), which the launcher pod
// controller neither deletes as a second pod nor takes for the VMI's; once bound, the
// migration is handed to node-a and node-b. Deleting the migration then deletes its pod.
func TestMigrationTargetPod(t *testing.T) {
	s := startMigration(t, "vm-target")
	p := s.target
	if ref := metav1.GetControllerOf(p); ref == nil || ref.UID != s.vmi.UID || ref.Kind != "VirtualMachineInstance" {
		t.Errorf("controller reference %+v", ref)
	}
	if p.Labels[launcherpod.LabelMigrationRole] != launcherpod.MigrationRoleTarget || p.Labels[launcherpod.LabelVMIUID] != string(s.vmi.UID) {
		t.Errorf("labels %v", p.Labels)
	}
	if p.Spec.NodeSelector["zone"] != "a" {
		t.Errorf("nodeSelector %v: want the VMI's", p.Spec.NodeSelector)
	}
	req := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if f := req.NodeSelectorTerms[0].MatchFields; len(req.NodeSelectorTerms) != 1 || len(f) != 1 || f[0].Key != "metadata.name" ||
		f[0].Operator != corev1.NodeSelectorOpNotIn || len(f[0].Values) != 1 || f[0].Values[0] != "node-a" {
		t.Errorf("required node affinity %+v: want metadata.name NotIn [node-a]", req)
	}
	s.stays(t, time.Second, "node-a", s.source, s.target)
	s.bound(t)
	s.stays(t, time.Second, "node-a", s.source, s.target)

	if err := env.Client.Delete(context.Background(), s.m); err != nil {
		t.Fatal(err)
	}
	// Handed to the nodes: the deletion asks the source to abort; its agent says it did.
	eventually(t, "abort requested", func() (bool, string) {
		ms := getVMI(t, s.vmi).Status.MigrationState
		return ms.AbortRequested, fmt.Sprintf("%+v", ms)
	})
	agentWrites(t, s.vmi, func(v *vmletv1.VirtualMachineInstance) {
		now := metav1.Now()
		ms := v.Status.MigrationState
		ms.Failed, ms.AbortStatus, ms.FailureReason, ms.EndTimestamp = true, vmletv1.MigrationAbortSucceeded, "aborted", &now
	})
	waitPodGone(t, s.target)
	eventually(t, "migration gone", func() (bool, string) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(s.m), s.m)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	s.stays(t, time.Second, "node-a", s.source)
}

// TestMigrationDeletedBeforeBind: a migration deleted while its target pod waits for a node
// takes the pod with it.
func TestMigrationDeletedBeforeBind(t *testing.T) {
	s := startMigration(t, "vm-unbound")
	if err := env.Client.Delete(context.Background(), s.m); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, s.target)
	s.stays(t, time.Second, "node-a", s.source)
}

// TestMigrationFailedKeepsVMI: the target launcher pod fails during the migration → the VMI
// keeps running on its source (past the agent grace), the nodes report the migration failed,
// and the target pod is deleted; the source pod stays the VMI's.
func TestMigrationFailedKeepsVMI(t *testing.T) {
	s := startMigration(t, "vm-fail")
	s.bound(t)
	kubeletWrites(t, s.target, corev1.PodFailed, 1)
	s.stays(t, agentGrace+2*time.Second, "node-a", s.source, s.target) // the agents fail the migration, not the VMI
	agentWrites(t, s.vmi, func(v *vmletv1.VirtualMachineInstance) {
		now := metav1.Now()
		ms := v.Status.MigrationState
		ms.Failed, ms.FailureReason, ms.EndTimestamp = true, "the target launcher exited", &now
	})
	waitPodGone(t, s.target)
	eventually(t, "migration Failed", func() (bool, string) {
		s.m = getMigration(t, s.m)
		return s.m.Status.Phase == vmletv1.MigrationFailed, string(s.m.Status.Phase)
	})
	v := getVMI(t, s.vmi)
	if v.Status.Phase != vmletv1.Running || v.Status.NodeName != "node-a" || v.Status.Launcher.Pod != s.source.Name {
		t.Errorf("vmi %s, launcher pod %s: want Running on node-a in %s", summary(v), v.Status.Launcher.Pod, s.source.Name)
	}
	if p := getPod(t, s.source); !p.DeletionTimestamp.IsZero() {
		t.Error("the source pod was deleted")
	}
}

// TestMigrationTakeover: the source launcher exits (pod Succeeded) after the migration
// completed and before the target's agent took the VMI over → the VMI is neither Succeeded nor
// Failed; the takeover (status.nodeName node-b) makes the target pod the VMI's
// (status.launcher.pod) and deletes the source pod; the migration Succeeded.
func TestMigrationTakeover(t *testing.T) {
	s := startMigration(t, "vm-move")
	s.bound(t)
	agentWrites(t, s.vmi, func(v *vmletv1.VirtualMachineInstance) {
		now := metav1.Now()
		ms := v.Status.MigrationState
		ms.TargetNodeAddress, ms.StartTimestamp = "192.0.2.1", &now
		ms.Completed, ms.EndTimestamp = true, &now
	})
	kubeletWrites(t, s.source, corev1.PodSucceeded, 0)
	s.stays(t, agentGrace+2*time.Second, "node-a", s.source, s.target)

	agentWrites(t, s.vmi, func(v *vmletv1.VirtualMachineInstance) { // the target's agent
		now := metav1.Now()
		v.Status.NodeName, v.Status.MigrationState.TargetNodeDomainReadyTimestamp = "node-b", &now
	})
	waitPodGone(t, s.source)
	v := waitVMI(t, s.vmi, "in its target pod", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Launcher != nil && v.Status.Launcher.Pod == s.target.Name
	})
	if v.Status.Phase != vmletv1.Running || v.Status.NodeName != "node-b" {
		t.Errorf("vmi %s: want Running on node-b", summary(v))
	}
	eventually(t, "migration Succeeded", func() (bool, string) {
		s.m = getMigration(t, s.m)
		return s.m.Status.Phase == vmletv1.MigrationSucceeded, string(s.m.Status.Phase)
	})
	s.stays(t, time.Second, "node-b", s.target)
}
