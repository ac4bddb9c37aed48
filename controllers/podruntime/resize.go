package podruntime

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
)

// ErrResizeInfeasible says the kubelet refused a resize (PodResizePending, reason Infeasible):
// the node cannot give the launcher what the VMI now asks for.
var ErrResizeInfeasible = errors.New("launcher pod resize infeasible")

// Resize makes the launcher pod's container resources res.Pod in place, through the pod's
// resize subresource (CPU and memory hotplug), and reports whether the kubelet applied them:
// nil once it did (or nothing changes), process.ErrResizing while it has not, ErrResizeInfeasible or the
// API server's refusal when it cannot be. Without Resizer the pods cannot be resized.
// Equivalent to: kubectl patch pod NAME --subresource resize -p '{"spec":{"containers":[...]}}'
func (r *Runtime) Resize(ctx context.Context, id string, res process.Resources) error {
	p, err := r.pod(ctx, id)
	if err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("resize launcher %s: %w", id, process.ErrNotFound)
	}
	i := containerIndex(p)
	if i < 0 {
		return fmt.Errorf("resize launcher pod %s: no %s container", p.Name, launcherpod.ContainerName)
	}
	// CPU and memory only: the device plugin resources the pod was created with stay.
	if cur := p.Spec.Containers[i].Resources; !equality.Semantic.DeepEqual(launcherpod.ComputeResources(cur), launcherpod.ComputeResources(res.Pod)) {
		if r.Resizer == nil {
			return fmt.Errorf("resize launcher pod %s: this agent cannot resize pods (no client for pods/resize)", p.Name)
		}
		old := p.DeepCopy()
		p.Spec.Containers[i].Resources = withCompute(cur, res.Pod)
		if err := r.Resizer.SubResource("resize").Patch(ctx, p, client.StrategicMergeFrom(old)); err != nil {
			return fmt.Errorf("resize launcher pod %s: %w", p.Name, err)
		}
		return fmt.Errorf("%w: pod %s asked for %v", process.ErrResizing, p.Name, res.Pod.Requests)
	}
	return resizeApplied(p, i, res.Pod)
}

// resizeApplied reads the pod's status: the kubelet's resize conditions, its observed
// generation and the container's actual resources (when the kubelet reports them).
func resizeApplied(p *corev1.Pod, i int, want corev1.ResourceRequirements) error {
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodResizePending && c.Reason == corev1.PodReasonInfeasible:
			return fmt.Errorf("%w: pod %s: %s", ErrResizeInfeasible, p.Name, c.Message)
		case c.Type == corev1.PodResizePending || c.Type == corev1.PodResizeInProgress:
			return fmt.Errorf("%w: pod %s: %s %s", process.ErrResizing, p.Name, c.Reason, c.Message)
		}
	}
	if g := p.Status.ObservedGeneration; g != 0 && g < p.Generation {
		return fmt.Errorf("%w: pod %s: the kubelet has not seen generation %d yet", process.ErrResizing, p.Name, p.Generation)
	}
	name := p.Spec.Containers[i].Name
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == name && cs.Resources != nil && !equality.Semantic.DeepEqual(launcherpod.ComputeResources(*cs.Resources), launcherpod.ComputeResources(want)) {
			return fmt.Errorf("%w: pod %s: container resources %v, want %v", process.ErrResizing, p.Name, cs.Resources.Requests, want.Requests)
		}
	}
	return nil
}

// withCompute is cur with its CPU and memory requests and limits replaced by want's (a CPU
// limit cur has and want has not is dropped); its other resources are kept.
func withCompute(cur, want corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *cur.DeepCopy()
	w := launcherpod.ComputeResources(want)
	for _, l := range []*struct{ dst, src *corev1.ResourceList }{{&out.Limits, &w.Limits}, {&out.Requests, &w.Requests}} {
		for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			q, ok := (*l.src)[n]
			switch {
			case ok && *l.dst == nil:
				*l.dst = corev1.ResourceList{n: q}
			case ok:
				(*l.dst)[n] = q
			default:
				delete(*l.dst, n)
			}
		}
	}
	return out
}

func containerIndex(p *corev1.Pod) int {
	for i, c := range p.Spec.Containers {
		if c.Name == launcherpod.ContainerName {
			return i
		}
	}
	return -1
}
