package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
)

func TestDrainTaintKeyIsTheControllers(t *testing.T) {
	if drainTaintKey != evacuation.TaintKey {
		t.Errorf("vmctl's drain taint %q, the evacuation controller's %q", drainTaintKey, evacuation.TaintKey)
	}
}

// TestDrain runs `vmctl drain` and `vmctl uncordon` against a real kube-apiserver, playing the
// evacuation controller's and the agents' part by writing VMI statuses between drain's looks
// (its clock's waits): the taint is added once, other taints are kept, each VMI's state is
// printed when it changes, a VMI that leaves stops counting, the one that blocks is named with
// its reason at the deadline (exit 4), an ended VMI does not count, and uncordon removes only
// the drain taint.
func TestDrain(t *testing.T) {
	env := startAPI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	keep := corev1.Taint{Key: "example.com/keep", Effect: corev1.TaintEffectPreferNoSchedule}
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{keep}}}); err != nil {
		t.Fatal(err)
	}
	// status writes the VMI's status as the evacuation controller and agents would.
	status := func(name string, f func(*vmletv1.VirtualMachineInstanceStatus)) {
		t.Helper()
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, v); err != nil {
			t.Fatal(err)
		}
		f(&v.Status)
		if err := c.Status().Update(ctx, v); err != nil {
			t.Fatalf("vmi %s status: %v", name, err)
		}
	}
	for _, name := range []string{"moves", "stuck", "ended", "elsewhere"} {
		v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		v.Spec.EvictionStrategy = ptr.To(vmletv1.EvictionStrategyLiveMigrate)
		q := resource.MustParse("128Mi")
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: &q}
		if err := c.Create(ctx, v); err != nil {
			t.Fatalf("create vmi %s: %v", name, err)
		}
	}
	status("moves", func(s *vmletv1.VirtualMachineInstanceStatus) {
		s.NodeName, s.Phase, s.EvacuationNodeName = "n1", vmletv1.Running, "n1"
	})
	status("stuck", func(s *vmletv1.VirtualMachineInstanceStatus) {
		s.NodeName, s.Phase, s.EvacuationNodeName = "n1", vmletv1.Running, "n1"
		s.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceEvacuationBlocked, Status: metav1.ConditionTrue,
			Reason: "EvacuationBlocked", Message: "cannot migrate (InterfaceNotLiveMigratable)", LastTransitionTime: metav1.Now()}}
	})
	status("ended", func(s *vmletv1.VirtualMachineInstanceStatus) { s.NodeName, s.Phase = "n1", vmletv1.Succeeded })
	status("elsewhere", func(s *vmletv1.VirtualMachineInstanceStatus) { s.NodeName, s.Phase = "n2", vmletv1.Running })

	taints := func() []corev1.Taint {
		t.Helper()
		n := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, n); err != nil {
			t.Fatal(err)
		}
		return n.Spec.Taints
	}
	hasDrain := func(ts []corev1.Taint) bool {
		return slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Key == drainTaintKey && t.Effect == corev1.TaintEffectNoSchedule })
	}

	t.Run("blocked at the deadline", func(t *testing.T) {
		waits := 0
		clock := &fakeClock{t: time.Unix(1e9, 0)}
		clock.onWait = func() {
			waits++
			if waits == 1 {
				if !hasDrain(taints()) {
					t.Error("drain waits but the node has no drain taint")
				}
				// The migration of "moves" completed: it runs on n2 now.
				status("moves", func(s *vmletv1.VirtualMachineInstanceStatus) { s.NodeName = "n2" })
			}
		}
		r := vmctl(t, clock, "drain", "n1", "--kubeconfig", env.Kubeconfig, "--deadline", "3s", "--interval", "1s")
		if r.code != exitBlocked {
			t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitBlocked, r.stdout, r.stderr)
		}
		wantOut := "node/n1 tainted vmlet.dev/drain:NoSchedule\n" +
			"vmi/default/moves: to be migrated (evictionStrategy LiveMigrate)\n" +
			"vmi/default/stuck: BLOCKS the drain: cannot migrate (InterfaceNotLiveMigratable)\n"
		if r.stdout != wantOut {
			t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, wantOut)
		}
		wantErr := "vmctl: node n1 not drained after 3s: 1 VMI(s) still there:\n  default/stuck: BLOCKS the drain: cannot migrate (InterfaceNotLiveMigratable)\n"
		if r.stderr != wantErr {
			t.Errorf("stderr:\n%s\nwant:\n%s", r.stderr, wantErr)
		}
		if waits != 3 {
			t.Errorf("drain looked %d times after the first, want 3 (3s deadline, 1s interval)", waits)
		}
		if ts := taints(); !hasDrain(ts) || !slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Key == keep.Key }) {
			t.Errorf("taints after drain: %v", ts)
		}
	})

	t.Run("drained", func(t *testing.T) {
		status("stuck", func(s *vmletv1.VirtualMachineInstanceStatus) { s.Phase = vmletv1.Failed })
		r := vmctl(t, &fakeClock{}, "drain", "n1", "--kubeconfig", env.Kubeconfig)
		want := "node/n1 already tainted vmlet.dev/drain:NoSchedule\nnode/n1 drained: no VMI runs there\n"
		if r.code != exitOK || r.stdout != want {
			t.Errorf("exit %d, stdout:\n%s\nwant 0 and:\n%s\nstderr: %s", r.code, r.stdout, want, r.stderr)
		}
		if n := len(slices.DeleteFunc(taints(), func(t corev1.Taint) bool { return t.Key != drainTaintKey })); n != 1 {
			t.Errorf("%d drain taints, want 1", n)
		}
	})

	t.Run("uncordon", func(t *testing.T) {
		r := vmctl(t, &fakeClock{}, "uncordon", "n1", "--kubeconfig", env.Kubeconfig)
		if r.code != exitOK || r.stdout != "node/n1 uncordoned (taint vmlet.dev/drain removed)\n" {
			t.Errorf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
		}
		// (The API server's TaintNodesByCondition adds node.kubernetes.io/not-ready itself.)
		if ts := taints(); slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Key == drainTaintKey }) ||
			!slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Key == keep.Key }) {
			t.Errorf("taints after uncordon: %v, want %s kept and no %s", ts, keep.Key, drainTaintKey)
		}
		r = vmctl(t, &fakeClock{}, "uncordon", "n1", "--kubeconfig", env.Kubeconfig)
		if r.code != exitOK || !strings.Contains(r.stdout, "was not drained") {
			t.Errorf("second uncordon: exit %d stdout %q", r.code, r.stdout)
		}
	})

	t.Run("no such node", func(t *testing.T) {
		r := vmctl(t, &fakeClock{}, "drain", "nope", "--kubeconfig", env.Kubeconfig)
		if r.code != exitError || !strings.Contains(r.stderr, `node nope: nodes "nope" not found`) {
			t.Errorf("exit %d stderr %q", r.code, r.stderr)
		}
	})
}

// TestDrainState: what drain prints of a VMI it waits for, as far as its spec and status tell;
// a VMI whose evictionStrategy is known is not described with another's outcome.
func TestDrainState(t *testing.T) {
	vmi := func(s *vmletv1.EvictionStrategy, evacuating bool) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.Spec.EvictionStrategy = s
		if evacuating {
			v.Status.EvacuationNodeName = "n1"
		}
		return v
	}
	for _, c := range []struct {
		name string
		v    *vmletv1.VirtualMachineInstance
		want string
	}{
		{"None", vmi(ptr.To(vmletv1.EvictionStrategyNone), false), "stays: evictionStrategy None (stop or delete it)"},
		{"LiveMigrate, not marked yet", vmi(ptr.To(vmletv1.EvictionStrategyLiveMigrate), false), "not marked for evacuation yet (evictionStrategy LiveMigrate)"},
		{"LiveMigrate, marked", vmi(ptr.To(vmletv1.EvictionStrategyLiveMigrate), true), "to be migrated (evictionStrategy LiveMigrate)"},
		{"External", vmi(ptr.To(vmletv1.EvictionStrategyExternal), false), "stays: evictionStrategy External (left to an external controller)"},
		{"unset", vmi(nil, false), "not marked for evacuation (evictionStrategy unset (the cluster's default)): not acted on yet, or None, which stays (stop or delete it)"},
	} {
		if got := drainState(c.v); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
