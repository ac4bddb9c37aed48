package realclustere2e_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/poll"
)

// minimalSpec is the smallest VMI the API accepts that boots the test guest: memory and a
// containerDisk (a volume with no disk gets a default virtio disk); no interfaces.
const minimalSpec = `spec:
  domain:
    memory: {guest: 128Mi}
    devices: {}
  volumes:
  - name: root
    containerDisk: {image: ` + diskImage + `}
`

// scheduled checks that the launcher pod was placed by kube-scheduler and is run by the kubelet
// from the launcher image, as the contract says (non-root, no privileges).
func scheduled(t testing.TB, vmi *vmletv1.VirtualMachineInstance) *corev1.Pod {
	t.Helper()
	pod := launcherPod(t, vmi)
	if pod == nil {
		t.Fatalf("no launcher pod: %s", summary(vmi))
	}
	// The second node is tainted: a VMI that does not tolerate it lands on the first.
	if onFirst := pod.Spec.NodeName == cl.NodeName; !onFirst && (len(vmi.Spec.Tolerations) == 0 || node(t, pod.Spec.NodeName).Name == "") ||
		pod.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("launcher pod %s on %q by %q", pod.Name, pod.Spec.NodeName, pod.Spec.SchedulerName)
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			t.Errorf("launcher pod %s: PodScheduled %s", pod.Name, c.Status)
		}
	}
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("launcher pod %s: %d container statuses", pod.Name, len(pod.Status.ContainerStatuses))
	}
	cs := pod.Status.ContainerStatuses[0]
	if cs.State.Running == nil || !strings.HasSuffix(cs.Image, launcherImage) || !strings.HasPrefix(cs.ContainerID, "containerd://") {
		t.Errorf("launcher container: %+v image %q id %q, want running %s by containerd", cs.State, cs.Image, cs.ContainerID, launcherImage)
	}
	if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("launcher pod runs as root: %+v", sc)
	}
	if pod.Status.PodIP == "" {
		t.Errorf("launcher pod %s has no pod IP", pod.Name)
	}
	return pod
}

// booted is a VMI created from spec (named prefix-<random>) whose guest booted, with its
// launcher pod (checked by scheduled) and its node footprint (nodeFootprint).
type booted struct {
	name string
	vmi  *vmletv1.VirtualMachineInstance
	pod  *corev1.Pod
	fp   footprint
}

func boot(t testing.TB, prefix, spec string) booted {
	t.Helper()
	b := booted{name: prefix + "-" + suffix()}
	createVMI(t, b.name, spec)
	b.vmi = waitBooted(t, b.name)
	b.pod = scheduled(t, b.vmi)
	b.fp = nodeFootprint(t, b.vmi, b.pod)
	return b
}

// TestVMIBootsAndDeletes: a minimal VMI gets a launcher pod that kube-scheduler places and the
// kubelet runs; its guest boots; QEMU runs on the node in the pod's cgroup and network
// namespace under vmlet's device program; `kubectl delete vmi` removes the pod, and nothing of
// the VM is left on the node.
func TestVMIBootsAndDeletes(t *testing.T) {
	need(t)
	t.Parallel()
	t0 := time.Now()
	b := boot(t, "minimal", minimalSpec)
	name, vmi, fp := b.name, b.vmi, b.fp
	t.Logf("created → guest booted (AgentConnected) in %s; QEMU pid %d, %s", time.Since(t0).Round(time.Millisecond),
		vmi.Status.Launcher.PID, vmi.Status.Launcher.Accelerator)

	t1 := time.Now()
	deleteVMI(t, name)
	poll.Until(t, goneTimeout, "launcher pod gone", func() (bool, string) {
		p := launcherPod(t, vmi)
		if p == nil {
			return true, ""
		}
		return false, p.Name + " " + string(p.Status.Phase)
	})
	assertGone(t, fp)
	t.Logf("kubectl delete vmi → pod and node objects gone in %s", time.Since(t1).Round(time.Millisecond))
}
