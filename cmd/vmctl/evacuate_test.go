package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
)

func TestEvacuationMarksAreTheControllers(t *testing.T) {
	if evacuationAnnotation != evacuation.AnnotationEvacuation || evacuationLabelVMI != evacuation.LabelVMIName {
		t.Errorf("vmctl's %q/%q, the evacuation controller's %q/%q", evacuationAnnotation, evacuationLabelVMI,
			evacuation.AnnotationEvacuation, evacuation.LabelVMIName)
	}
}

// TestEvacuateCancel runs `vmctl evacuate-cancel` against a real kube-apiserver: the VMI's
// mark is cleared and only its evacuation migrations that have not ended are deleted (not one
// that ended, not one a person made, not another VMI's); --node does every VMI marked to
// leave the node, in every namespace; a VMI on a node with the drain taint is refused (exit
// 7) and keeps its mark; a VMI not being evacuated is said to be so; a missing one exits 3.
func TestEvacuateCancel(t *testing.T) {
	env := startAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	for _, o := range []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Unschedulable: true}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: drainTaintKey, Effect: corev1.TaintEffectNoSchedule}}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	vmi := func(ns, name, node, mark string) {
		t.Helper()
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		q := resource.MustParse("128Mi")
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: &q}
		if err := c.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		v.Status.NodeName, v.Status.Phase, v.Status.EvacuationNodeName = node, vmletv1.Running, mark
		if err := c.Status().Update(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	vmi("default", "leaving", "n1", "n1")
	vmi("team", "also-leaving", "n1", "n1")
	vmi("default", "staying", "n1", "")
	vmi("default", "neighbour", "n1", "")
	vmi("default", "drained", "n2", "n2")
	migration := func(ns, name, vmiName string, evacuation bool, phase vmletv1.VirtualMachineInstanceMigrationPhase) {
		t.Helper()
		m := &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: vmletv1.VirtualMachineInstanceMigrationSpec{VMIName: vmiName}}
		if evacuation {
			m.Annotations = map[string]string{evacuationAnnotation: "n1"}
			m.Labels = map[string]string{evacuationLabelVMI: vmiName}
		}
		if err := c.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
		if phase != "" {
			m.Status.Phase = phase
			if err := c.Status().Update(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	migration("default", "vmlet-evacuation-running", "leaving", true, vmletv1.MigrationRunning)
	migration("default", "vmlet-evacuation-pending", "leaving", true, "")
	migration("default", "vmlet-evacuation-done", "leaving", true, vmletv1.MigrationSucceeded)
	migration("default", "by-hand", "leaving", false, vmletv1.MigrationRunning)
	migration("default", "vmlet-evacuation-other", "neighbour", true, vmletv1.MigrationRunning)
	migration("team", "vmlet-evacuation-team", "also-leaving", true, vmletv1.MigrationScheduling)
	mark := func(ns, name string) string {
		t.Helper()
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, v); err != nil {
			t.Fatal(err)
		}
		return v.Status.EvacuationNodeName
	}
	exists := func(ns, name string) bool {
		t.Helper()
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &vmletv1.VirtualMachineInstanceMigration{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}

	r := vmctl(t, &fakeClock{}, "evacuate-cancel", "leaving", "--kubeconfig", env.Kubeconfig)
	want := "virtualmachineinstancemigration/vmlet-evacuation-pending deleted (phase Pending: aborted, the guest stays on its node)\n" +
		"virtualmachineinstancemigration/vmlet-evacuation-running deleted (phase Running: aborted, the guest stays on its node)\n" +
		"vmi/default/leaving: evacuation cancelled\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("evacuate-cancel leaving: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if m := mark("default", "leaving"); m != "" {
		t.Errorf("leaving still marked %q", m)
	}
	for name, want := range map[string]bool{"vmlet-evacuation-running": false, "vmlet-evacuation-pending": false,
		"vmlet-evacuation-done": true, "by-hand": true, "vmlet-evacuation-other": true} {
		if got := exists("default", name); got != want {
			t.Errorf("migration %s exists %v, want %v", name, got, want)
		}
	}

	r = vmctl(t, &fakeClock{}, "evacuate-cancel", "staying", "--kubeconfig", env.Kubeconfig)
	if r.code != exitOK || r.stdout != "vmi/default/staying: not being evacuated\n" {
		t.Errorf("evacuate-cancel staying: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	r = vmctl(t, &fakeClock{}, "evacuate-cancel", "drained", "--kubeconfig", env.Kubeconfig)
	if r.code != exitConflict || !strings.Contains(r.stderr, "drain taint") || !strings.Contains(r.stderr, "vmctl uncordon n2") {
		t.Errorf("evacuate-cancel on a drained node: exit %d stderr %q", r.code, r.stderr)
	}
	if m := mark("default", "drained"); m != "n2" {
		t.Errorf("the refused VMI's mark %q, want n2 kept", m)
	}

	r = vmctl(t, &fakeClock{}, "evacuate-cancel", "--node", "n1", "--kubeconfig", env.Kubeconfig)
	want = "virtualmachineinstancemigration/vmlet-evacuation-team deleted (phase Scheduling: aborted, the guest stays on its node)\n" +
		"vmi/team/also-leaving: evacuation cancelled\n"
	if r.code != exitOK || r.stdout != want {
		t.Errorf("evacuate-cancel --node n1: exit %d\nstdout:\n%s\nwant:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if m := mark("team", "also-leaving"); m != "" {
		t.Errorf("also-leaving still marked %q", m)
	}
	r = vmctl(t, &fakeClock{}, "evacuate-cancel", "--node", "n1", "--kubeconfig", env.Kubeconfig)
	if r.code != exitOK || r.stdout != "no VMI is marked to leave node/n1\n" {
		t.Errorf("second evacuate-cancel --node n1: exit %d stdout %q", r.code, r.stdout)
	}

	r = vmctl(t, &fakeClock{}, "evacuate-cancel", "nope", "--kubeconfig", env.Kubeconfig)
	if r.code != exitNotFound {
		t.Errorf("evacuate-cancel nope: exit %d stderr %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"evacuate-cancel"}, {"evacuate-cancel", "a", "--node", "n1"}, {"evacuate-cancel", "a", "b"}} {
		if r := vmctl(t, &fakeClock{}, append(args, "--kubeconfig", env.Kubeconfig)...); r.code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, r.code, exitUsage)
		}
	}
}
