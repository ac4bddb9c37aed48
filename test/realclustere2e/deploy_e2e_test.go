package realclustere2e_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// TestDeployed: kubectl apply -k config/realcluster made the controller's pod (on the first
// node) and an agent pod on each node (the second one's kubelet and containerd included), which
// the kubelets run from the imported vmlet image, Ready (their probes pass), and each agent's
// heartbeat labels its node schedulable for VMIs.
func TestDeployed(t *testing.T) {
	need(t)
	t.Parallel()
	var nodes []string
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Name)
	}
	for name, want := range map[string][]string{"vmlet-controller": {cl.NodeName}, "vmlet-agent": nodes} {
		var l corev1.PodList
		if err := kc.List(context.Background(), &l, client.InNamespace("vmlet-system"),
			client.MatchingLabels{launcherpod.LabelAppName: name}); err != nil {
			t.Fatal(err)
		}
		var on []string
		for _, p := range l.Items {
			on = append(on, p.Spec.NodeName)
		}
		if slices.Sort(on); !slices.Equal(on, want) {
			t.Fatalf("%s: pods on nodes %q, want %q", name, on, want)
		}
		for _, p := range l.Items {
			checkDeployedPod(t, name, p)
		}
	}
	for _, name := range nodes {
		var node corev1.Node
		if err := kc.Get(context.Background(), client.ObjectKey{Name: name}, &node); err != nil {
			t.Fatal(err)
		}
		if node.Labels[launcherpod.NodeLabelSchedulable] != "true" {
			t.Errorf("node %s labels %v: want %s=true from the agent's heartbeat", name, node.Labels, launcherpod.NodeLabelSchedulable)
		}
	}
}

// checkDeployedPod: the pod runs vmlet's image under containerd and is Ready.
func checkDeployedPod(t testing.TB, name string, p corev1.Pod) {
	t.Helper()
	if p.Status.Phase != corev1.PodRunning {
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
		t.Logf("%s on %s: %s %s (%s), restarts %d", name, p.Spec.NodeName, cs.Name, cs.Image, cs.ImageID, cs.RestartCount)
	}
}
