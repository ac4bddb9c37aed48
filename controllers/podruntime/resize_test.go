package podruntime

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

func podResources(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
	}
}

// withTun adds the tun device limit launcher pods have (launcherpod.DeviceLimits).
func withTun(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	r.Limits[launcherpod.ResourceTun] = resource.MustParse("1")
	return r
}

// TestResizeThroughTheAPIServer resizes a launcher pod through a real API server's pods/resize
// subresource: the spec follows (its device plugin resources kept: the API server refuses a
// resize that drops them), the kubelet's answer (here written into the pod's status as a
// kubelet would, CPU and memory only) decides when the resize counts as applied, an infeasible
// one is refused, and a resize the API server rejects comes back as its error.
func TestResizeThroughTheAPIServer(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const uid = "0d1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a99"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vmlet-launcher-x", Labels: map[string]string{launcherpod.LabelVMIUID: uid}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: launcherpod.ContainerName, Image: "vmlet.dev/launcher:test", Resources: withTun(podResources("100m", "400Mi")),
		}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{Pods: env.Client, Resizer: env.Client}
	grown := podResources("300m", "660Mi")
	if err := r.Resize(ctx, uid, process.Resources{Pod: grown}); !errors.Is(err, process.ErrResizing) {
		t.Fatalf("first resize: %v, want ErrResizing (asked, not applied yet)", err)
	}
	got := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if c := got.Spec.Containers[0].Resources; c.Requests.Cpu().Cmp(resource.MustParse("300m")) != 0 || c.Limits.Memory().Cmp(resource.MustParse("660Mi")) != 0 ||
		c.Limits.Name(launcherpod.ResourceTun, resource.DecimalSI).Value() != 1 {
		t.Fatalf("pod resources after the resize %v", c)
	}

	setStatus := func(conds []corev1.PodCondition, actual *corev1.ResourceRequirements) {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		got.Status.Conditions = conds
		got.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: launcherpod.ContainerName, Resources: actual, Image: "x", ImageID: "x"}}
		if err := env.Client.Status().Update(ctx, got); err != nil {
			t.Fatal(err)
		}
	}
	old := podResources("100m", "400Mi")
	setStatus([]corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue}}, &old)
	if err := r.Resize(ctx, uid, process.Resources{Pod: grown}); !errors.Is(err, process.ErrResizing) {
		t.Fatalf("while the kubelet resizes: %v, want ErrResizing", err)
	}
	setStatus(nil, &old)
	if err := r.Resize(ctx, uid, process.Resources{Pod: grown}); !errors.Is(err, process.ErrResizing) {
		t.Fatalf("container still at its old resources: %v, want ErrResizing", err)
	}
	setStatus(nil, &grown)
	if err := r.Resize(ctx, uid, process.Resources{Pod: grown}); err != nil {
		t.Fatalf("applied: %v", err)
	}
	setStatus([]corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible, Message: "Node didn't have enough capacity"}}, &grown)
	if err := r.Resize(ctx, uid, process.Resources{Pod: grown}); !errors.Is(err, ErrResizeInfeasible) {
		t.Fatalf("infeasible: %v, want ErrResizeInfeasible", err)
	}
	// The API server refuses a resize that changes the pod's QoS class (Burstable →
	// Guaranteed: CPU request = limit and memory request = limit).
	guaranteed := podResources("1", "660Mi")
	guaranteed.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	if err := r.Resize(ctx, uid, process.Resources{Pod: guaranteed}); !apierrors.IsInvalid(err) {
		t.Fatalf("QoS change: %v, want the API server's Invalid", err)
	}
	if err := (&Runtime{Pods: env.Client}).Resize(ctx, uid, process.Resources{Pod: old}); err == nil || errors.Is(err, process.ErrResizing) {
		t.Fatalf("without a Resizer: %v, want a refusal", err)
	}
}
