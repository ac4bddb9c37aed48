package clustere2e_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestClusterKubectlDrain: `kubectl drain` of a node in cluster mode, through the eviction
// webhook. Each VMI whose pod must not be evicted has a PodDisruptionBudget, kept by the real
// disruption controller: with the vmlet controller stopped and its webhook gone, the drain is
// still refused. Then the eviction of a LiveMigrate VMI's launcher pod is refused with 429
// while the VMI migrates to the other node (status.evacuationNodeName, an evacuation
// migration, a target pod); its source pod then ends and the drain completes, the guest's
// process still counting. A LiveMigrate VMI that cannot migrate (a bridge on the pod network)
// keeps its pod: the drain times out naming why, the VMI runs on. A LiveMigrateIfPossible VMI
// that cannot migrate is evicted: its guest powers off (ACPI) and the VMI ends. After
// `kubectl uncordon` the node takes the first VMI back by migration.
func TestClusterKubectlDrain(t *testing.T) {
	start := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), what) }
	c := startClusterWith(t, clusterOptions{nodes: 2, evictionWebhook: true})
	ctx := context.Background()
	cl := c.env.Client
	second := c.others[0].name
	mk := func(name string, strategy vmletv1.EvictionStrategy, masquerade bool) *vmletv1.VirtualMachineInstance {
		v := guestvmi.VMI(name, guestImage)
		v.Spec.EvictionStrategy = &strategy
		if masquerade {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
				InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
			v.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
		} // else KubeVirt's default: a bridge on the pod network, not migratable
		if err := cl.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Delete(context.Background(), v) })
		return v
	}
	moving := mk("drain-moves", vmletv1.EvictionStrategyLiveMigrate, true)
	stuck := mk("drain-stuck", vmletv1.EvictionStrategyLiveMigrate, false)
	stops := mk("drain-stops", vmletv1.EvictionStrategyLiveMigrateIfPossible, false)
	t.Cleanup(func() {
		if out, err := c.env.Kubectl("uncordon", nodeName); err != nil {
			t.Logf("uncordon: %v: %s", err, out)
		}
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := cl.List(context.Background(), &l, client.InNamespace("default")); err == nil {
			for i := range l.Items {
				_ = cl.Delete(context.Background(), &l.Items[i])
			}
		}
	})
	ready := c.waitVMI(t, client.ObjectKeyFromObject(moving), 3*time.Minute, "Ready, migratable, its guest agent connected", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
	})
	for _, v := range []*vmletv1.VirtualMachineInstance{stuck, stops} {
		c.waitVMI(t, client.ObjectKeyFromObject(v), 3*time.Minute, "Ready, not migratable", func(v *vmletv1.VirtualMachineInstance) bool {
			return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
				meta.IsStatusConditionFalse(v.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
		})
	}
	if ready.Status.NodeName != nodeName {
		t.Fatalf("%s on %q, want %s", moving.Name, ready.Status.NodeName, nodeName)
	}
	pid := strings.TrimSpace(c.guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!"))
	sourcePod := c.launcherPod(t, string(moving.UID))
	step("both VMIs ready")

	drain := func(uid types.UID, timeout string) (string, error) {
		out, err := c.env.Kubectl("drain", nodeName, "--ignore-daemonsets", "--delete-emptydir-data",
			"--pod-selector", launcherpod.LabelVMIUID+"="+string(uid), "--timeout", timeout)
		return string(out), err
	}
	// Each VMI that must not be evicted has its PodDisruptionBudget, which kube-controller-
	// manager's disruption controller keeps: with the webhook down (the controller stopped: the
	// webhook fails open) the API server still refuses the eviction.
	disruptionController(t, c)
	for _, v := range []*vmletv1.VirtualMachineInstance{moving, stuck} {
		poll.Until(t, time.Minute, "the PodDisruptionBudget of "+v.Name+", observed", func() (bool, string) {
			pdb := &policyv1.PodDisruptionBudget{}
			err := cl.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: evacuation.PDBName(v)}, pdb)
			ok := err == nil && pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() == 1 &&
				pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.ExpectedPods == 1
			return ok, fmt.Sprintf("%v %+v", err, pdb.Status)
		})
	}
	// LiveMigrateIfPossible and not migratable: nothing keeps its pod.
	pdb := &policyv1.PodDisruptionBudget{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: stops.Namespace, Name: evacuation.PDBName(stops)}, pdb); !apierrors.IsNotFound(err) {
		t.Errorf("the PodDisruptionBudget of %s (LiveMigrateIfPossible, not migratable): %v, want none", stops.Name, err)
	}
	step("stopping the controller and removing its webhook")
	c.controller.stop(t)
	c.forget(c.controller)
	// As unreachable, and quicker: kube-apiserver retries an unreachable webhook for close to a
	// minute per eviction before it fails open.
	wc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	wc.Name = evacuation.WebhookConfigName
	if err := cl.Delete(ctx, wc); err != nil {
		t.Fatal(err)
	}
	out, err := drain(moving.UID, "5s")
	if err == nil || !strings.Contains(out, "disruption budget") {
		t.Fatalf("kubectl drain with the webhook down: %v\n%s\nwant a refusal by the PodDisruptionBudget", err, out)
	}
	if p := c.launcherPod(t, string(moving.UID)); p.Name != sourcePod.Name || !p.DeletionTimestamp.IsZero() {
		t.Fatalf("launcher pod after the refused eviction: %s, deleting %v", p.Name, !p.DeletionTimestamp.IsZero())
	}
	c.controller = c.run(t, "controller", c.controllerArgs...)
	step("controller restarted; kubectl drain")
	out, err = drain(moving.UID, "3m")
	if err != nil {
		t.Fatalf("kubectl drain (%s): %v\n%s", moving.Name, err, out)
	}
	t.Logf("kubectl drain:\n%s", out)
	if !strings.Contains(out, "Eviction triggered evacuation") {
		t.Errorf("kubectl drain never heard of the evacuation:\n%s", out)
	}
	v := c.waitVMI(t, client.ObjectKeyFromObject(moving), time.Minute, "Ready on "+second, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName == second && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	if got := strings.TrimSpace(c.guestShell(t, v, "kill -0 "+pid+" && echo ok")); got != "ok" {
		t.Fatalf("counter process %s gone after the drain", pid)
	}
	var ml vmletv1.VirtualMachineInstanceMigrationList
	if err := cl.List(ctx, &ml, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	evacuations := 0
	for _, m := range ml.Items {
		if m.Spec.VMIName == moving.Name && m.Annotations[evacuation.AnnotationEvacuation] == nodeName && m.Status.Phase == vmletv1.MigrationSucceeded {
			evacuations++
		}
	}
	if evacuations != 1 {
		t.Errorf("%d succeeded evacuation migrations of %s, want 1", evacuations, moving.Name)
	}
	step("moved")
	c.waitNodeClean(t, nodeName, moving, sourcePod)
	step("source node clean")
	if v.Status.EvacuationNodeName != "" {
		c.waitVMI(t, client.ObjectKeyFromObject(moving), 30*time.Second, "no longer marked", func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.EvacuationNodeName == ""
		})
	}

	step("kubectl drain of the VMI that cannot migrate")
	out, err = drain(stuck.UID, "15s")
	if err == nil {
		t.Fatalf("kubectl drain of the VMI that cannot migrate succeeded:\n%s", out)
	}
	if !strings.Contains(out, "cannot migrate") || !strings.Contains(out, stuck.Name) {
		t.Errorf("kubectl drain does not say why:\n%s", out)
	}
	c.waitVMI(t, client.ObjectKeyFromObject(stuck), 30*time.Second, "still running on "+nodeName, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName == nodeName && v.Status.Phase == vmletv1.Running
	})
	if p := c.launcherPod(t, string(stuck.UID)); p.Status.Phase != corev1.PodRunning || !p.DeletionTimestamp.IsZero() {
		t.Errorf("the stuck VMI's pod %s: %s, deleting %v", p.Name, p.Status.Phase, !p.DeletionTimestamp.IsZero())
	}

	step("kubectl drain of the VMI that may stop")
	// Its console, read through a descriptor opened now: the run folder goes with the launcher.
	serialPath := filepath.Join(launcherpod.HostRunDir(c.launcherRoot, stops.UID), "logs", "serial.log")
	poll.Until(t, 2*time.Minute, "guest ready marker in "+serialPath, func() (bool, string) {
		b, _ := os.ReadFile(serialPath)
		return strings.Contains(string(b), testguest.MarkerReady), poll.Tail(string(b), 2000)
	})
	serial, err := os.Open(serialPath)
	if err != nil {
		t.Fatal(err)
	}
	defer serial.Close()
	stopsPod := c.launcherPod(t, string(stops.UID))
	if out, err = drain(stops.UID, "2m"); err != nil {
		t.Fatalf("kubectl drain (%s): %v\n%s", stops.Name, err, out)
	}
	ended := c.waitVMI(t, client.ObjectKeyFromObject(stops), time.Minute, "ended", func(v *vmletv1.VirtualMachineInstance) bool {
		return vmistatus.IsFinal(v.Status.Phase)
	})
	if ended.Status.Reason != string(vmistatus.ReasonLauncherPodDeleted) {
		t.Errorf("%s ended %s (%s), want reason %s", stops.Name, ended.Status.Phase, ended.Status.Reason, vmistatus.ReasonLauncherPodDeleted)
	}
	var console string
	poll.Until(t, time.Minute, "the guest's power-off on its console", func() (bool, string) {
		b, _ := io.ReadAll(serial)
		console += string(b)
		return strings.Contains(console, testguest.MarkerPoweroff), poll.Tail(console, 2000)
	})
	c.waitNodeClean(t, nodeName, stops, stopsPod)

	step("uncordon: the node takes VMIs again")
	if out, err := c.env.Kubectl("uncordon", nodeName); err != nil {
		t.Fatalf("uncordon: %v: %s", err, out)
	}
	onSecond := c.launcherPod(t, string(moving.UID))
	back := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "drain-back"},
		Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: moving.Name}}
	if err := cl.Create(ctx, back); err != nil {
		t.Fatal(err)
	}
	v = c.waitVMI(t, client.ObjectKeyFromObject(moving), 2*time.Minute, "migrated back to "+nodeName, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName == nodeName && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	if got := strings.TrimSpace(c.guestShell(t, v, "kill -0 "+pid+" && echo ok")); got != "ok" {
		t.Fatalf("counter process %s gone after the migration back", pid)
	}
	c.waitNodeClean(t, second, moving, onSecond)
	step("back")

	// An evacuation cancelled (vmctl evacuate-cancel, KubeVirt's virtctl evacuate-cancel) while
	// its migration runs, slowed by a policy to 1 MiB/s: the migration is aborted, the mark
	// cleared, the guest runs on where it was and no other evacuation starts.
	slow := &migrationsv1.MigrationPolicy{ObjectMeta: metav1.ObjectMeta{Name: "drain-cancel-slow"}}
	slow.Spec.Selectors = &migrationsv1.Selectors{VirtualMachineInstanceSelector: map[string]string{"drain-test": "slow"}}
	slow.Spec.BandwidthPerMigration = ptr.To(resource.MustParse("1Mi"))
	if err := cl.Create(ctx, slow); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), slow) })
	if out, err := c.env.Kubectl("label", "vmi", moving.Name, "drain-test=slow"); err != nil {
		t.Fatalf("label: %v: %s", err, out)
	}
	if out, err = drain(moving.UID, "3s"); err == nil || !strings.Contains(out, "Eviction triggered evacuation") {
		t.Fatalf("kubectl drain of the slowed VMI: %v\n%s\nwant a refusal that starts its evacuation", err, out)
	}
	var running vmletv1.VirtualMachineInstanceMigration
	poll.Until(t, time.Minute, "the evacuation migration running", func() (bool, string) {
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := cl.List(ctx, &l, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		var phases []string
		for _, m := range l.Items {
			if m.Spec.VMIName == moving.Name && m.Annotations[evacuation.AnnotationEvacuation] != "" && m.Status.Phase != vmletv1.MigrationSucceeded {
				phases = append(phases, m.Name+" "+string(m.Status.Phase))
				if m.Status.Phase == vmletv1.MigrationRunning {
					running = m
					return true, ""
				}
			}
		}
		return false, fmt.Sprint(phases)
	})
	cmd := exec.Command(vmctl, "evacuate-cancel", moving.Name, "--kubeconfig", c.env.Kubeconfig)
	cancelOut, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(cancelOut), running.Name+" deleted") || !strings.Contains(string(cancelOut), "evacuation cancelled") {
		t.Fatalf("vmctl evacuate-cancel: %v\n%s", err, cancelOut)
	}
	t.Logf("vmctl evacuate-cancel:\n%s", cancelOut)
	poll.Until(t, time.Minute, "the cancelled migration gone (aborted)", func() (bool, string) {
		err := cl.Get(ctx, client.ObjectKeyFromObject(&running), &vmletv1.VirtualMachineInstanceMigration{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	v = c.waitVMI(t, client.ObjectKeyFromObject(moving), time.Minute, "Ready on "+nodeName+", unmarked, its migration aborted", func(v *vmletv1.VirtualMachineInstance) bool {
		ms := v.Status.MigrationState
		return v.Status.NodeName == nodeName && v.Status.EvacuationNodeName == "" && ms != nil && ms.MigrationUID == running.UID &&
			ms.AbortStatus == vmletv1.MigrationAbortSucceeded && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	})
	if got := strings.TrimSpace(c.guestShell(t, v, "kill -0 "+pid+" && echo ok")); got != "ok" {
		t.Fatalf("counter process %s gone after the cancelled evacuation", pid)
	}
	c.waitNodeClean(t, second, moving, nil) // the aborted target
	var l vmletv1.VirtualMachineInstanceMigrationList
	if err := cl.List(ctx, &l, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, m := range l.Items {
		if m.Spec.VMIName == moving.Name && m.CreationTimestamp.After(running.CreationTimestamp.Time) {
			t.Errorf("migration %s (%s) started after the cancel", m.Name, m.Status.Phase)
		}
	}
	step("evacuation cancelled")
}

// disruptionController runs kube-controller-manager with only its disruption controller (the
// one that keeps PodDisruptionBudgets' status, which the API server's eviction reads) until t
// ends.
func disruptionController(t *testing.T, c *cluster) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(apienv.RepoRoot(), "test", "assets", "controlplane", "build.sh"))
	cmd.Env = append(os.Environ(), "BINARIES=kube-controller-manager")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("build kube-controller-manager: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	p := c.run(t, "kube-controller-manager", filepath.Join(lines[len(lines)-1], "kube-controller-manager"),
		"--kubeconfig="+c.env.Kubeconfig, "--controllers=disruption", "--leader-elect=false", "--secure-port=0")
	p.diesOnTerm = true
}
