package cluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// TestLauncherPodCreated: a pending VMI gets one launcher pod as the contract says, and the
// VMI is Scheduling with the pod's name in its status.
func TestLauncherPodCreated(t *testing.T) {
	startController(t)
	ns := namespace(t)
	vmi := newVMI(t, ns, "vm1", func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.NodeSelector = map[string]string{"zone": "a"}
		v.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10))
		v.Spec.Domain.CPU = &vmletv1.CPU{Cores: 2}
	})
	pod := waitPod(t, vmi)
	got := waitVMI(t, vmi, "Scheduling with its pod", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Scheduling && v.Status.Launcher != nil && v.Status.Launcher.Pod == pod.Name
	})
	if got.Status.NodeName != "" {
		t.Errorf("nodeName %q before the pod is bound", got.Status.NodeName)
	}
	if !strings.HasPrefix(pod.Name, "vmlet-launcher-vm1-") {
		t.Errorf("pod name %s", pod.Name)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != vmi.UID || ref.Kind != "VirtualMachineInstance" || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller reference %+v", ref)
	}
	if pod.Labels[launcherpod.LabelVMIUID] != string(vmi.UID) || pod.Labels[launcherpod.LabelVMI] != "vm1" ||
		pod.Labels[launcherpod.LabelAppName] != launcherpod.AppName || pod.Annotations[launcherpod.AnnotVMIName] != "vm1" {
		t.Errorf("labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	wantSel := map[string]string{"zone": "a", controllers.LabelSchedulable: "true"}
	if len(pod.Spec.NodeSelector) != len(wantSel) || pod.Spec.NodeSelector["zone"] != "a" || pod.Spec.NodeSelector[controllers.LabelSchedulable] != "true" {
		t.Errorf("nodeSelector %v, want %v", pod.Spec.NodeSelector, wantSel)
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || *pod.Spec.TerminationGracePeriodSeconds != 25 || *pod.Spec.AutomountServiceAccountToken {
		t.Errorf("restartPolicy %s grace %d automount %v", pod.Spec.RestartPolicy, *pod.Spec.TerminationGracePeriodSeconds, *pod.Spec.AutomountServiceAccountToken)
	}
	c := pod.Spec.Containers[0]
	wantArgs := strings.Join(controllers.DefaultLauncherArgs(launcherpod.HostRunDir("/run/vl", vmi.UID), ns+"_vm1", 10e9), " ")
	if len(pod.Spec.Containers) != 1 || c.Name != launcherpod.ContainerName || c.Image != "vmlet-launcher:test" ||
		strings.Join(c.Command, " ") != launcherpod.Binary || strings.Join(c.Args, " ") != wantArgs {
		t.Errorf("container %s image %s command %v args %v", c.Name, c.Image, c.Command, c.Args)
	}
	want, err := launcherpod.Resources(getVMI(t, vmi), launcherpod.DefaultTCGCacheMiB) // the controller's (suite_test.go)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceCPU} {
		if g, w := c.Resources.Requests[n], want.Requests[n]; g.Cmp(w) != 0 {
			t.Errorf("%s request %s, want %s", n, g.String(), w.String())
		}
	}
	if g := c.Resources.Limits[corev1.ResourceMemory]; g.Cmp(*c.Resources.Requests.Memory()) != 0 || g.Cmp(resource.MustParse("256Mi")) <= 0 {
		t.Errorf("memory limit %s, request %s", g.String(), c.Resources.Requests.Memory())
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		hostPaths[v.Name] = v.HostPath.Path
	}
	if hostPaths[launcherpod.RunVolume] != "/run/vl/"+string(vmi.UID) || hostPaths[launcherpod.StorageVolume] != "/var/lib/vl/"+string(vmi.UID) {
		t.Errorf("host paths %v", hostPaths)
	}
	waitEvent(t, vmi, "Normal", "SuccessfulCreate")
}

// TestOnePodAcrossRestarts: reconciles triggered in a burst right after the create (the cache
// lags behind it) and controller restarts never make a second pod; a restarted controller that
// finds a pod its status does not name (the status write was lost) adopts it.
func TestOnePodAcrossRestarts(t *testing.T) {
	ns := namespace(t)
	pods := map[string]string{} // VMI name → its pod
	for i := range 3 {
		stop := startController(t)
		vmi := newVMI(t, ns, "burst-"+string(rune('a'+i)), nil)
		for j := range 20 { // each update is an event, so a reconcile
			v := getVMI(t, vmi)
			if v.Labels == nil {
				v.Labels = map[string]string{}
			}
			v.Labels["poke"] = string(rune('a' + j))
			if err := env.Client.Update(context.Background(), v); err != nil && !apierrors.IsConflict(err) {
				t.Fatal(err)
			}
		}
		pods[vmi.Name] = waitPod(t, vmi).Name
		stop()
	}
	for range 2 {
		var l vmletv1.VirtualMachineInstanceList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range l.Items { // forget the pods while no controller runs
			l.Items[i].Status.Launcher = nil
			if err := env.Client.Status().Update(context.Background(), &l.Items[i]); err != nil {
				t.Fatal(err)
			}
		}
		stop := startController(t)
		for i := range l.Items {
			waitVMI(t, &l.Items[i], "names its pod again", func(v *vmletv1.VirtualMachineInstance) bool {
				return v.Status.Launcher != nil && v.Status.Launcher.Pod == pods[v.Name]
			})
		}
		stop()
	}
	var l vmletv1.VirtualMachineInstanceList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		if n := len(podsOf(t, &l.Items[i])); n != 1 {
			t.Errorf("%s has %d launcher pods", l.Items[i].Name, n)
		}
	}
}

// bind binds the pod to node as kube-scheduler does: the pods/binding subresource.
func bind(t *testing.T, pod *corev1.Pod, node string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := cs.CoreV1().Pods(pod.Namespace).Bind(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("bind %s to %s: %v", pod.Name, node, err)
	}
}

func TestBoundPodSchedulesVMI(t *testing.T) {
	startController(t)
	vmi := newVMI(t, namespace(t), "vm1", nil)
	pod := waitPod(t, vmi)
	bind(t, pod, "node-7")
	got := waitVMI(t, vmi, "Scheduled on node-7", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Scheduled && v.Status.NodeName == "node-7"
	})
	if got.Status.Launcher == nil || got.Status.Launcher.Pod != pod.Name {
		t.Errorf("status.launcher %+v", got.Status.Launcher)
	}
	waitEvent(t, vmi, "Normal", "Scheduled")
	if n := len(podsOf(t, vmi)); n != 1 {
		t.Errorf("%d pods after scheduling", n)
	}
}

// TestFailedPodFailsVMI: the kubelet reports the launcher container terminated with the
// launcher's "QEMU died" status → after the grace left to the (here absent) node agent, the VMI
// fails with the reason, an Event, and its pod goes.
func TestFailedPodFailsVMI(t *testing.T) {
	startController(t)
	vmi := newVMI(t, namespace(t), "vm1", nil)
	pod := waitPod(t, vmi)
	bind(t, pod, "node-1")
	waitVMI(t, vmi, "Scheduled", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Scheduled })
	// As a kubelet writes it.
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: launcherpod.ContainerName, Image: p.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 4, Reason: "Error", Message: "qemu: terminating on signal 9", StartedAt: metav1.Now(), FinishedAt: metav1.Now(),
		}},
	}}
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	got := waitVMI(t, vmi, "Failed", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Failed })
	// FinishedAt is stored in whole seconds: the grace counts from up to 1 s earlier.
	if waited := time.Since(ended); waited < agentGrace-time.Second {
		t.Errorf("failed %s after the container ended, before the node agent's grace (%s)", waited, agentGrace)
	}
	if got.Status.Reason != string(vmistatus.ReasonLauncherPodFailed) {
		t.Errorf("reason %q", got.Status.Reason)
	}
	note := waitEvent(t, vmi, "Warning", string(vmistatus.ReasonLauncherPodFailed))
	for _, want := range []string{"exited with code 4", "QEMU ended unexpectedly", "reason Error", "terminating on signal 9"} {
		if !strings.Contains(note, want) {
			t.Errorf("event note %q lacks %q", note, want)
		}
	}
	waitPodGone(t, pod)
}

func TestDeletedPodFailsVMI(t *testing.T) {
	startController(t)
	vmi := newVMI(t, namespace(t), "vm1", nil)
	pod := waitPod(t, vmi)
	waitVMI(t, vmi, "Scheduling", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Scheduling })
	if err := env.Client.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	got := waitVMI(t, vmi, "Failed", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Failed })
	if got.Status.Reason != string(vmistatus.ReasonLauncherPodDeleted) {
		t.Errorf("reason %q", got.Status.Reason)
	}
	waitEvent(t, vmi, "Warning", string(vmistatus.ReasonLauncherPodDeleted))
	if n := len(podsOf(t, vmi)); n != 0 {
		t.Errorf("%d pods after the VMI failed: a failed VMI must not get a new one", n)
	}
}

// TestUnschedulablePod: the scheduler's PodScheduled=False/Unschedulable shows on the VMI.
func TestUnschedulablePod(t *testing.T) {
	startController(t)
	vmi := newVMI(t, namespace(t), "vm1", nil)
	pod := waitPod(t, vmi)
	p := &corev1.Pod{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.",
		LastTransitionTime: metav1.Now()})
	if err := env.Client.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitVMI(t, vmi, "Unschedulable", func(v *vmletv1.VirtualMachineInstance) bool {
		for _, c := range v.Status.Conditions {
			if c.Type == vmletv1.VirtualMachineInstanceReady && c.Reason == string(vmistatus.ReasonUnschedulable) && strings.Contains(c.Message, "0/3 nodes") {
				return v.Status.Phase == vmletv1.Scheduling
			}
		}
		return false
	})
	waitEvent(t, vmi, "Warning", "FailedScheduling")
}

// TestFinalVMIDeletesPod: the node agent reports the guest powered off → the pod is deleted.
func TestFinalVMIDeletesPod(t *testing.T) {
	startController(t)
	vmi := newVMI(t, namespace(t), "vm1", nil)
	pod := waitPod(t, vmi)
	bind(t, pod, "node-1")
	v := waitVMI(t, vmi, "Scheduled", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Scheduled })
	vmistatus.SetPhase(v, vmletv1.Succeeded)
	v.Status.Reason = "GuestShutdown"
	if err := env.Client.Status().Update(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, pod)
	waitEvent(t, vmi, "Normal", "SuccessfulDelete")
	if got := getVMI(t, vmi); got.Status.Phase != vmletv1.Succeeded || got.Status.Reason != "GuestShutdown" {
		t.Errorf("VMI changed after the pod's deletion: %s", summary(got))
	}
}

// TestDeletedVMIDeletesPod: no garbage collector runs here; the controller deletes the pod.
// A VMI created again under the same name gets a new pod of its own.
func TestDeletedVMIDeletesPod(t *testing.T) {
	startController(t)
	ns := namespace(t)
	vmi := newVMI(t, ns, "vm1", nil)
	pod := waitPod(t, vmi)
	if err := env.Client.Delete(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	waitPodGone(t, pod)
	again := newVMI(t, ns, "vm1", nil)
	if p := waitPod(t, again); p.UID == pod.UID {
		t.Error("the new VMI reuses the old VMI's pod")
	}
}
