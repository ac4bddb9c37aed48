package realclustere2e_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// TestDeployed: kubectl apply -k config/realcluster made the controller's and the agent's
// pods, which the kubelet runs from the imported vmlet image, Ready (their probes pass), and the
// agent's heartbeat labels the node schedulable for VMIs.
func TestDeployed(t *testing.T) {
	need(t)
	t.Parallel()
	for _, name := range []string{"vmlet-controller", "vmlet-agent"} {
		var l corev1.PodList
		if err := kc.List(context.Background(), &l, client.InNamespace("vmlet-system"),
			client.MatchingLabels{launcherpod.LabelAppName: name}); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 {
			t.Fatalf("%s: %d pods, want 1", name, len(l.Items))
		}
		p := l.Items[0]
		if p.Status.Phase != corev1.PodRunning || p.Spec.NodeName != cl.NodeName {
			t.Errorf("%s: phase %s on %q", name, p.Status.Phase, p.Spec.NodeName)
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}
		if !ready {
			t.Errorf("%s: not Ready: %+v", name, p.Status.Conditions)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !strings.HasSuffix(cs.Image, vmletImage) || !strings.HasPrefix(cs.ContainerID, "containerd://") {
				t.Errorf("%s: container %s runs image %q as %q, want %s by containerd", name, cs.Name, cs.Image, cs.ContainerID, vmletImage)
			}
			t.Logf("%s: %s %s (%s), restarts %d", name, cs.Name, cs.Image, cs.ImageID, cs.RestartCount)
		}
	}
	var node corev1.Node
	if err := kc.Get(context.Background(), client.ObjectKey{Name: cl.NodeName}, &node); err != nil {
		t.Fatal(err)
	}
	if node.Labels[launcherpod.NodeLabelSchedulable] != "true" {
		t.Errorf("node labels %v: want %s=true from the agent's heartbeat", node.Labels, launcherpod.NodeLabelSchedulable)
	}
}
