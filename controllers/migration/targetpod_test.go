package migration_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

var podOpts = launcherpod.Options{
	Image: "vmlet-launcher:test", AllowEmulation: true,
	Args: func(runDir, name string, _ time.Duration) []string {
		return []string{"--run-dir", runDir, "--name", name}
	},
	DomainName: func(v *vmletv1.VirtualMachineInstance) string { return v.Namespace + "_" + v.Name },
}

func migratingVMI() *vmletv1.VirtualMachineInstance {
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "vm1", UID: "vmi-uid"}}
	mem := resource.MustParse("128Mi")
	vmi.Spec.Domain.Memory = &vmletv1.Memory{Guest: &mem}
	vmi.Spec.NodeSelector = map[string]string{"zone": "a"}
	vmi.Status.Phase, vmi.Status.NodeName = vmletv1.Running, "node-a"
	vmi.Status.SelinuxContext = "system_u:system_r:virt_launcher.process:s0:c1,c2"
	return vmi
}

// TestTargetPod: the target pod is the source's pod as launcherpod builds it (same container,
// volumes, claims, node selector, owner, SELinux type) with the source's SELinux level, the
// migration's labels and a required node affinity term that excludes the source node; the
// claims of the source's hot-plugged volumes are added to its claims.
func TestTargetPod(t *testing.T) {
	vmi := migratingVMI()
	srcOpts := podOpts
	srcOpts.SELinuxType = "virt_launcher.process" // the cluster's selinuxLauncherType when the source was made
	claims := []launcherpod.Claim{{ClaimName: "shared", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/shared",
		CapacityBytes: 1 << 30, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}}}
	source, err := launcherpod.Build(vmi, srcOpts, claims)
	if err != nil {
		t.Fatal(err)
	}
	source.Name, source.Spec.NodeName = "vmlet-launcher-vm1-abcde", "node-a"
	m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "m", UID: "mig-uid"}}
	req := migration.TargetRequest{Migration: m, VMI: vmi, Config: migration.Resolve(vmletv1.MigrationConfiguration{})}

	pod, err := migration.TargetPod(req, source, nil, podOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got := launcherpod.MigrationTarget(pod); got != m.UID {
		t.Errorf("MigrationTarget %q, want %q (labels %v)", got, m.UID, pod.Labels)
	}
	if got := launcherpod.MigrationTarget(source); got != "" {
		t.Errorf("the source pod is a migration target: %q", got)
	}
	wantLabels := launcherpod.Labels(vmi.Name, vmi.UID)
	wantLabels[launcherpod.LabelMigrationUID], wantLabels[launcherpod.LabelMigrationRole] = "mig-uid", "target"
	if d := cmp.Diff(wantLabels, pod.Labels); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	wantAffinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-a"}}}}}}}}
	if d := cmp.Diff(wantAffinity, pod.Spec.Affinity); d != "" {
		t.Errorf("affinity (-want +got):\n%s", d)
	}
	if source.Spec.Affinity != nil {
		t.Errorf("the source pod got an affinity: %+v", source.Spec.Affinity)
	}
	// Everything else is the source's pod: same build, same inputs.
	for what, pair := range map[string][2]any{
		"ownerReferences": {source.OwnerReferences, pod.OwnerReferences},
		"annotations":     {source.Annotations, pod.Annotations},
		"generateName":    {source.GenerateName, pod.GenerateName},
		"nodeSelector":    {source.Spec.NodeSelector, pod.Spec.NodeSelector},
		"containers":      {source.Spec.Containers, pod.Spec.Containers},
		"volumes":         {source.Spec.Volumes, pod.Spec.Volumes},
	} {
		if d := cmp.Diff(pair[0], pair[1]); d != "" {
			t.Errorf("%s differ from the source pod's (-source +target):\n%s", what, d)
		}
	}
	if pod.Spec.NodeName != "" {
		t.Errorf("nodeName %q: kube-scheduler places it", pod.Spec.NodeName)
	}
	if got, want := pod.Spec.SecurityContext.SELinuxOptions, (&corev1.SELinuxOptions{Type: "virt_launcher.process", Level: "s0:c1,c2"}); !cmp.Equal(got, want) {
		t.Errorf("seLinuxOptions %+v, want %+v (the source's type and level)", got, want)
	}

	// addedNodeSelector narrows the target's nodes: its new keys are added, the vmi's win.
	vmiKey := ""
	for k := range source.Spec.NodeSelector {
		vmiKey = k
	}
	m.Spec.AddedNodeSelector = map[string]string{"rack": "b", vmiKey: "overridden"}
	pod, err = migration.TargetPod(req, source, nil, podOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(source.Spec.NodeSelector)
	want["rack"] = "b"
	if d := cmp.Diff(want, pod.Spec.NodeSelector); d != "" {
		t.Errorf("nodeSelector with addedNodeSelector (-want +got):\n%s", d)
	}
	m.Spec.AddedNodeSelector = nil

	req.Config.MatchSELinuxLevelOnMigration = ptr.To(false)
	pod, err = migration.TargetPod(req, source, nil, podOpts)
	if err != nil {
		t.Fatal(err)
	}
	if got := pod.Spec.SecurityContext.SELinuxOptions; got == nil || got.Level != "" || got.Type != "virt_launcher.process" {
		t.Errorf("matchSELinuxLevelOnMigration false: seLinuxOptions %+v, want the type and no level", got)
	}

	// The source's hot-plugged claims (its attachment pods'): the target pod mounts them too,
	// once each, after the source pod's.
	hot := []launcherpod.Claim{
		{ClaimName: "hot-blk", Mode: corev1.PersistentVolumeBlock, Path: "/dev/loop7", CapacityBytes: 8 << 20,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}},
		claims[0],
	}
	pod, err = migration.TargetPod(req, source, hot, podOpts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := launcherpod.PodClaims(pod)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(append(claims, hot[0]), got); d != "" {
		t.Errorf("target pod claims with hot-plugged ones (-want +got):\n%s", d)
	}
	if devs := pod.Spec.Containers[0].VolumeDevices; len(devs) != 1 || devs[0].DevicePath != "/dev/loop7" {
		t.Errorf("target pod volume devices %+v, want the hot-plugged block claim at /dev/loop7", devs)
	}

	req.Config.MatchSELinuxLevelOnMigration = nil
	vmi.Status.SelinuxContext = ""
	if _, err := migration.TargetPod(req, source, nil, podOpts); !errors.Is(err, launcherpod.ErrNoSELinuxContext) {
		t.Errorf("no selinuxContext yet: err %v, want ErrNoSELinuxContext (wait for the agent)", err)
	}
}

// TestTargetPodsWithControllerRole: the migration controller of cluster mode, with nothing but
// the generated ClusterRole, makes a migration's target pod, keeps the migration in Scheduling
// with kube-scheduler's message while the pod is unbound, hands the migration to the nodes once
// it is bound (vmi labelled with both nodes, migrationState naming both pods), and deletes the
// target pod when the nodes report the migration failed.
func TestTargetPodsWithControllerRole(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{AddToScheme: []func(*k8sruntime.Scheme) error{vmletv1.AddToScheme, migrationsv1.AddToScheme}})
	if err != nil {
		t.Fatalf("start api server: %v", err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	mgr, err := ctrl.NewManager(controllerRole(ctx, t, env), manager.Options{
		Scheme: env.Scheme,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{launcherpod.LabelAppName: launcherpod.AppName})},
		}},
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	tp := &migration.TargetPods{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Pods: podOpts}
	c := &migration.Controller{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vmlet-migration"),
		Pick: tp.Pick, Pods: tp}
	if err := c.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "target-pods"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	vmi := migratingVMI()
	vmi.Namespace, vmi.UID = ns.Name, ""
	vmi.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	status := vmi.Status
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	vmi.Status = status
	vmi.Status.SelinuxContext = "none"
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	source, err := launcherpod.Build(vmi, podOpts, nil) // as the cluster controller made it
	if err != nil {
		t.Fatal(err)
	}
	source.Spec.NodeName = "node-a"
	if err := env.Client.Create(ctx, source); err != nil {
		t.Fatal(err)
	}
	m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "m"}}
	m.Spec.VMIName = vmi.Name
	if err := env.Client.Create(ctx, m); err != nil {
		t.Fatal(err)
	}

	var target corev1.Pod
	waitFor(t, "the target pod", func() (bool, string) {
		var l corev1.PodList
		if err := env.Client.List(ctx, &l, client.InNamespace(ns.Name), client.MatchingLabels{launcherpod.LabelMigrationUID: string(m.UID)}); err != nil {
			return false, err.Error()
		}
		if len(l.Items) > 1 {
			t.Fatalf("%d target pods", len(l.Items))
		}
		if len(l.Items) == 1 {
			target = l.Items[0]
		}
		return len(l.Items) == 1, "none"
	})
	if ref := metav1.GetControllerOf(&target); ref == nil || ref.UID != vmi.UID {
		t.Errorf("target pod controller %+v, want the vmi", ref)
	}
	scheduled := func(msg string) func() (bool, string) {
		return func() (bool, string) {
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(m.Status.Conditions, "TargetScheduled")
			if c == nil {
				return false, string(m.Status.Phase) + " without TargetScheduled"
			}
			return m.Status.Phase == vmletv1.MigrationScheduling && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, msg),
				string(m.Status.Phase) + " " + c.Message
		}
	}
	waitFor(t, "waiting for the pod", scheduled("waiting for the target launcher pod "+target.Name+" to be scheduled"))

	// kube-scheduler finds no node.
	const why = "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient memory."
	target.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: why, LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(ctx, &target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the scheduler's message", scheduled(why))

	// Then binds it.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns.Name).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: target.Name, UID: target.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "handed to the nodes", func() (bool, string) {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
			return false, err.Error()
		}
		return m.Status.Phase == vmletv1.MigrationScheduled, string(m.Status.Phase)
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), vmi); err != nil {
		t.Fatal(err)
	}
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID != m.UID || ms.SourceNode != "node-a" || ms.TargetNode != "node-b" || ms.SourcePod != source.Name || ms.TargetPod != target.Name {
		t.Fatalf("migrationState %+v: want node-a/%s → node-b/%s", ms, source.Name, target.Name)
	}
	if vmi.Labels[migration.LabelSourceNode] != "node-a" || vmi.Labels[migration.LabelTargetNode] != "node-b" {
		t.Errorf("vmi labels %v", vmi.Labels)
	}

	// The nodes report the migration failed: its target pod goes, the source stays.
	now := metav1.Now()
	ms.Failed, ms.FailureReason, ms.EndTimestamp = true, "the target's agent refused it", &now
	if err := env.Client.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "target pod deleted", func() (bool, string) {
		p := &corev1.Pod{}
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(&target), p)
		if err != nil {
			return client.IgnoreNotFound(err) == nil, err.Error()
		}
		return !p.DeletionTimestamp.IsZero(), "still there" // bound: terminating until a kubelet says so
	})
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	if m.Status.Phase != vmletv1.MigrationFailed {
		t.Errorf("migration %s, want Failed", m.Status.Phase)
	}
	p := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(source), p); err != nil || !p.DeletionTimestamp.IsZero() {
		t.Errorf("source pod: %v, deletion %v", err, p.DeletionTimestamp)
	}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within a minute; last seen: %s", what, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestAddNodeSelector(t *testing.T) {
	vmi := map[string]string{"zone": "a"}
	for _, c := range []struct {
		name       string
		sel, added map[string]string
		want       map[string]string
	}{
		{"nothing added", vmi, nil, vmi},
		{"a new key", vmi, map[string]string{"rack": "b"}, map[string]string{"zone": "a", "rack": "b"}},
		{"the vmi's key wins", vmi, map[string]string{"zone": "c"}, map[string]string{"zone": "a"}},
		{"no selector of its own", nil, map[string]string{"rack": "b"}, map[string]string{"rack": "b"}},
	} {
		if got := migration.AddNodeSelector(c.sel, c.added); !cmp.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if len(vmi) != 1 || vmi["zone"] != "a" {
		t.Errorf("the vmi's selector changed: %v", vmi)
	}
}
