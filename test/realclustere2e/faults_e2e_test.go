package realclustere2e_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
	"golang.org/x/sys/unix"
)

// agentPod is the agent DaemonSet's pod on the first node, nil while there is none.
func agentPod(t testing.TB) *corev1.Pod { return agentPodOn(t, cl.NodeName) }

// agentPodOn is the agent DaemonSet's pod on the node, nil while there is none.
func agentPodOn(t testing.TB, node string) *corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := kc.List(context.Background(), &l, client.InNamespace("vmlet-system"),
		client.MatchingLabels{launcherpod.LabelAppName: "vmlet-agent"}); err != nil {
		t.Fatal(err)
	}
	for i := range l.Items {
		if l.Items[i].DeletionTimestamp == nil && l.Items[i].Spec.NodeName == node {
			return &l.Items[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestAgentPodRecreatedAdopts: deleting the agent's pod (kubectl delete pod) lets the DaemonSet
// make a new one; the VM keeps running throughout (same QEMU process), the new agent becomes
// Ready (its readiness needs every Running VMI's launcher to answer it) and drives the VM: a
// delete afterwards shuts it down and cleans the node. Not parallel: every VMI of the node
// lives through the agent's restart.
func TestAgentPodRecreatedAdopts(t *testing.T) {
	need(t)
	b := boot(t, "adopt", minimalSpec)
	name, fp := b.name, b.fp
	old := agentPod(t)
	if old == nil {
		t.Fatal("no agent pod")
	}
	t0 := time.Now()
	kubectl(t, "", "delete", "pod", "-n", "vmlet-system", old.Name, "--wait", "--timeout=2m")
	var now *corev1.Pod
	poll.Until(t, 3*time.Minute, "a new agent pod Ready", func() (bool, string) {
		now = agentPod(t)
		if now == nil {
			return false, "no agent pod"
		}
		return now.UID != old.UID && podReady(now), string(now.Status.Phase)
	})
	t.Logf("agent pod deleted → new agent pod %s Ready in %s", now.Name, time.Since(t0).Round(time.Millisecond))
	if st, err := readStart(fp.qemuPid); err != nil || st != fp.qemuStart {
		t.Fatalf("QEMU %d did not survive the agent's restart: %v", fp.qemuPid, err)
	}
	after := getVMI(t, name)
	if after.Status.Phase != vmletv1.Running || after.Status.Launcher == nil || int(after.Status.Launcher.PID) != fp.qemuPid {
		t.Fatalf("after the agent's restart: %s, launcher %+v (QEMU %d)", summary(after), after.Status.Launcher, fp.qemuPid)
	}
	deleteVMI(t, name)
	assertGone(t, fp)
}

// TestQEMUKilled: QEMU killed on the node (status.launcher.pid, in the node's PID namespace)
// turns the VMI Failed with reason QEMUDied; deleting it cleans the node.
func TestQEMUKilled(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "qemu-killed", minimalSpec)
	name, fp := b.name, b.fp
	t0 := time.Now()
	if err := unix.Kill(fp.qemuPid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := waitVMI(t, name, 2*time.Minute, "Failed", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Failed })
	t.Logf("QEMU SIGKILL → VMI Failed (%s) in %s", failed.Status.Reason, time.Since(t0).Round(time.Millisecond))
	if failed.Status.Reason != "QEMUDied" {
		t.Errorf("failed with reason %q, want QEMUDied: %s", failed.Status.Reason, summary(failed))
	}
	deleteVMI(t, name)
	assertGone(t, fp)
}

// TestLauncherPodDeletedGraceful: `kubectl delete pod` of a launcher pod (the kubelet's SIGTERM
// to the launcher) shuts the guest down gracefully (ACPI power button: the guest's poweroff
// marker on its console) within the VMI's grace period, and the pod goes.
func TestLauncherPodDeletedGraceful(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "pod-deleted", strings.Replace(minimalSpec, "spec:\n", "spec:\n  terminationGracePeriodSeconds: 60\n", 1))
	name, vmi, pod, fp := b.name, b.vmi, b.pod, b.fp
	// AgentConnected can come before the guest's acpid listens: wait for its ready marker.
	waitSerial(t, fp, testguest.MarkerReady)
	c, _ := console(t, fp)
	t0 := time.Now()
	kubectl(t, "", "delete", "pod", "-n", "default", pod.Name, "--wait=false")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.Wait(ctx, testguest.MarkerPoweroff); err != nil {
		t.Fatalf("no graceful shutdown within the grace period: %v; console: %s; %s", err, poll.Tail(c.String(), 2000), summary(getVMI(t, name)))
	}
	t.Logf("kubectl delete pod → guest powers off in %s", time.Since(t0).Round(time.Millisecond))
	poll.Until(t, 75*time.Second, "QEMU exits and the pod goes", func() (bool, string) {
		_, err := readStart(fp.qemuPid)
		p := launcherPod(t, vmi)
		return err != nil && p == nil, "pod still there or QEMU alive"
	})
	t.Logf("kubectl delete pod → pod gone in %s", time.Since(t0).Round(time.Millisecond))
	v := waitVMI(t, name, time.Minute, "final phase", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Succeeded || v.Status.Phase == vmletv1.Failed
	})
	t.Logf("VMI after its pod's deletion: %s", summary(v))
	deleteVMI(t, name)
	assertGone(t, fp)
}

// TestLauncherPodDeletedGuestIgnoresACPI: a guest that ignores the power button keeps running
// after `kubectl delete pod` until the VMI's grace period ends (the launcher then stops QEMU),
// not less: nothing on the node cuts the grace period short (the agent, seeing the VMI failed
// with LauncherPodDeleted, killed the launcher at once before), and not much more (the pod's
// grace is the VMI's plus launcherpod.GraceMargin).
func TestLauncherPodDeletedGuestIgnoresACPI(t *testing.T) {
	need(t)
	t.Parallel()
	const grace = 20 * time.Second
	b := boot(t, "no-acpi", `spec:
  terminationGracePeriodSeconds: 20
  domain:
    memory: {guest: 128Mi}
    firmware:
      kernelBoot:
        kernelArgs: `+testguest.BaseCmdline+` `+testguest.CmdlineNoACPI+`
        container: {image: `+kernelImage+`, kernelPath: /vmlinuz, initrdPath: /initramfs.gz}
    devices: {}
`)
	name, pod, fp := b.name, b.pod, b.fp
	waitSerial(t, fp, testguest.MarkerReady)
	c, _ := console(t, fp)
	t0 := time.Now()
	kubectl(t, "", "delete", "pod", "-n", "default", pod.Name, "--wait=false")
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := c.Wait(ctx, testguest.MarkerPowerdownIgnored); err != nil {
		_, gone := readStart(fp.qemuPid)
		t.Fatalf("the guest got no power button after %s: %v (QEMU gone: %v; VMI: %s); console: %s", time.Since(t0).Round(time.Millisecond),
			err, gone, summary(getVMI(t, name)), poll.Tail(c.String(), 2000))
	}
	poll.Until(t, grace+launcherpod.GraceMargin+30*time.Second, "QEMU ends", func() (bool, string) {
		_, err := readStart(fp.qemuPid)
		return err != nil, "running"
	})
	ended := time.Since(t0)
	t.Logf("kubectl delete pod, guest ignoring ACPI → QEMU ended after %s (grace %s)", ended.Round(time.Millisecond), grace)
	if ended < grace-2*time.Second {
		t.Errorf("QEMU ended %s after the pod's deletion, before the VMI's grace period (%s)", ended.Round(time.Millisecond), grace)
	}
	deleteVMI(t, name)
	assertGone(t, fp)
}
