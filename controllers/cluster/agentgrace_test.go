package cluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

func TestLeftToAgent(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ended := func(phase corev1.PodPhase, at time.Time) *corev1.Pod {
		p := &corev1.Pod{Status: corev1.PodStatus{Phase: phase}}
		if !at.IsZero() {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: launcherpod.ContainerName,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 4, FinishedAt: metav1.NewTime(at)}}}}
		}
		return p
	}
	onNode := &vmletv1.VirtualMachineInstance{Status: vmletv1.VirtualMachineInstanceStatus{NodeName: "n1"}}
	unscheduled := &vmletv1.VirtualMachineInstance{}
	r := &Reconciler{}
	for _, tc := range []struct {
		name string
		vmi  *vmletv1.VirtualMachineInstance
		pod  *corev1.Pod
		want time.Duration
	}{
		{"just ended on a node", onNode, ended(corev1.PodFailed, now.Add(-time.Second)), DefaultAgentGrace - time.Second},
		{"completed on a node", onNode, ended(corev1.PodSucceeded, now), DefaultAgentGrace},
		{"grace over", onNode, ended(corev1.PodFailed, now.Add(-time.Minute)), 0},
		{"no finish time", onNode, ended(corev1.PodFailed, time.Time{}), 0},
		{"still running", onNode, &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, 0},
		{"never on a node", unscheduled, ended(corev1.PodFailed, now), 0},
	} {
		if got := r.leftToAgent(tc.vmi, tc.pod, now); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
