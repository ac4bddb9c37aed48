package main_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/evacuation"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
)

// TestLocalDrain: with `vmlet local --nodes 2`, a NoSchedule taint on node 2 puts a migratable
// VMI (masquerade, evictionStrategy LiveMigrate) on node 1; two VMIs pinned to node 1 cannot
// migrate (no interfaces: KubeVirt's auto-attached bridge), one LiveMigrateIfPossible, one
// LiveMigrate. `vmctl drain node-1` taints node 1 vmlet.dev/drain:NoSchedule: the migratable
// VMI moves to node 2 by a vmlet-evacuation-* migration (its guest's counter process lives on),
// the IfPossible one is shut down and ends Failed with reason Evicted (its launcher and QEMU
// gone), the LiveMigrate one stays Running and a second `vmctl drain` names it as blocking
// (exit 4). While drained a new VMI goes to node 2 although node 1 has as few VMIs; after
// `vmctl uncordon node-1` the next one lands on node 1 again and the block is lifted.
func TestLocalDrain(t *testing.T) {
	s := newLocalSetup(t)
	st := s.startTwoNodes(t, "e2d")
	p, fabric, nodes, plan, uplinkBefore := st.p, st.fabric, st.nodes, st.plan, st.uplinkBefore
	c := s.client(t)
	ctx := context.Background()
	kubeconfig := filepath.Join(s.stateDir, "kubeconfig")
	kc := func(args ...string) string { t.Helper(); return st.kc(t, s, args...) }
	vmctl := func(args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(buildVmctl(t, s), append(args, "--kubeconfig", kubeconfig)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return out.String(), errb.String(), ee.ExitCode()
		case err != nil:
			t.Fatalf("vmctl %v: %v", args, err)
		}
		return out.String(), errb.String(), 0
	}
	create := func(v *vmletv1.VirtualMachineInstance) {
		t.Helper()
		if err := c.Create(ctx, v); err != nil {
			t.Fatalf("create vmi %s: %v", v.Name, err)
		}
	}
	scheduledTo := func(name string) string {
		t.Helper()
		return waitFor(t, c, client.ObjectKey{Namespace: "default", Name: name}, time.Minute, "scheduled", func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.NodeName != ""
		}).Status.NodeName
	}
	running := func(name string) *vmletv1.VirtualMachineInstance {
		t.Helper()
		return waitFor(t, c, client.ObjectKey{Namespace: "default", Name: name}, 4*time.Minute, "Running", func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.Phase == vmletv1.Running && v.Status.Launcher != nil && v.Status.Launcher.PID > 0
		})
	}

	// Any NoSchedule taint keeps VMIs off a node: the migratable VMI (no nodeSelector, so that
	// it can move) goes to node 1.
	kc("taint", "nodes", nodes[1], "example.com/maintenance=test:NoSchedule")
	mv := masqueradeVMI("evac-mig")
	mv.Spec.EvictionStrategy = ptr.To(vmletv1.EvictionStrategyLiveMigrate)
	create(mv)
	vm := s.runningOn(t, c, "evac-mig")
	if vm.node != nodes[0] {
		t.Fatalf("evac-mig on %s while %s is tainted NoSchedule", vm.node, nodes[1])
	}
	kc("taint", "nodes", nodes[1], "example.com/maintenance-")
	pinned := func(name string, s vmletv1.EvictionStrategy) *vmletv1.VirtualMachineInstance {
		v := guestvmi.VMI(name, demoImage) // no interfaces: the auto bridge, not migratable
		v.Spec.EvictionStrategy = ptr.To(s)
		v.Spec.NodeSelector = map[string]string{corev1.LabelHostname: nodes[0]}
		return v
	}
	create(pinned("evac-ifp", vmletv1.EvictionStrategyLiveMigrateIfPossible))
	create(pinned("evac-stuck", vmletv1.EvictionStrategyLiveMigrate))
	ifp, stuck := running("evac-ifp"), running("evac-stuck")
	ifpLauncher := readPid(t, filepath.Join(s.runRoot, nodes[0], string(ifp.UID), "launcher.pid"))
	for _, name := range []string{"evac-ifp", "evac-stuck"} {
		waitFor(t, c, client.ObjectKey{Namespace: "default", Name: name}, time.Minute, "LiveMigratable=False", func(v *vmletv1.VirtualMachineInstance) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
			return c != nil && c.Status == "False"
		})
	}
	waitFor(t, c, vm.key, 3*time.Minute, "guest agent connected", func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	sock := func(vm nodeVM) string { return filepath.Join(s.runRoot, vm.node, vm.uid, process.ReadySocket) }
	pid := strings.TrimSpace(guestSh(t, sock(vm), "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!"))
	before := guestCount(t, sock(vm))

	// The drain: the first vmctl gives up after 2 s (exit 4), the controllers go on.
	start := time.Now()
	out, errOut, code := vmctl("drain", nodes[0], "--deadline", "2s")
	t.Logf("vmctl drain --deadline 2s: exit %d\n%s%s", code, out, errOut)
	if code != 4 || !strings.Contains(out, "node/"+nodes[0]+" tainted vmlet.dev/drain:NoSchedule") {
		t.Fatalf("first drain: exit %d, want 4 (VMIs still there)\n%s%s", code, out, errOut)
	}
	// The migratable VMI moves to node 2 by an evacuation migration; its guest lives on.
	var evac string
	poll.Until(t, 5*time.Minute, "evac-mig's evacuation migration Succeeded", func() (bool, string) {
		var l vmletv1.VirtualMachineInstanceMigrationList
		if err := c.List(ctx, &l, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, m := range l.Items {
			seen = append(seen, m.Name+"/"+m.Spec.VMIName+"/"+string(m.Status.Phase))
			if m.Spec.VMIName != "evac-mig" || !strings.HasPrefix(m.Name, evacuation.GenerateName) {
				continue
			}
			if m.Status.Phase == vmletv1.MigrationFailed {
				t.Logf("evacuation migration %s failed (retried with back-off): %+v", m.Name, m.Status.Conditions)
			}
			if m.Status.Phase == vmletv1.MigrationSucceeded {
				evac = m.Name
				return m.Annotations[evacuation.AnnotationEvacuation] == nodes[0] && m.Labels[evacuation.LabelVMIName] == "evac-mig", "labels"
			}
		}
		return false, strings.Join(seen, " ")
	})
	t.Logf("%s Succeeded %s after the taint", evac, time.Since(start).Round(time.Millisecond))
	from := vm
	waitFor(t, c, vm.key, time.Minute, "on "+nodes[1], func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.NodeName == nodes[1] })
	vm = s.runningOn(t, c, "evac-mig")
	waitGuestAgent(t, sock(vm))
	if got := strings.TrimSpace(guestSh(t, sock(vm), "[ -d /proc/"+pid+" ] && echo "+pid+" || true")); got != pid {
		t.Fatalf("counter process %s gone on %s: %q", pid, vm.node, got)
	}
	poll.Until(t, 30*time.Second, "the counter counts on "+vm.node, func() (bool, string) {
		n := guestCount(t, sock(vm))
		return n > before, fmt.Sprintf("count %d, before the drain %d", n, before)
	})
	s.waitNodeVMGone(t, from, 2*time.Minute)

	// The IfPossible one was shut down: Failed, reason Evicted, nothing of it left running.
	gone := waitFor(t, c, client.ObjectKey{Namespace: "default", Name: "evac-ifp"}, 2*time.Minute, "Failed, Evicted", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Failed
	})
	if gone.Status.Reason != "Evicted" {
		t.Errorf("evac-ifp ended with reason %q, want Evicted (conditions %+v)", gone.Status.Reason, gone.Status.Conditions)
	}
	poll.Until(t, time.Minute, "evac-ifp's launcher and QEMU gone", func() (bool, string) {
		return !poll.Alive(ifpLauncher) && !poll.Alive(int(ifp.Status.Launcher.PID)), "alive"
	})
	t.Logf("evac-ifp: %s %s", gone.Status.Reason, meta.FindStatusCondition(gone.Status.Conditions, vmletv1.VirtualMachineInstanceReady).Message)

	// The LiveMigrate one stays, running, and blocks: the drain names it.
	waitFor(t, c, client.ObjectKey{Namespace: "default", Name: "evac-stuck"}, time.Minute, "EvacuationBlocked", func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstanceEvacuationBlocked)
	})
	if v := running("evac-stuck"); v.Status.NodeName != nodes[0] || v.Status.Launcher.PID != stuck.Status.Launcher.PID {
		t.Errorf("evac-stuck: node %s QEMU %d, want still on %s as QEMU %d", v.Status.NodeName, v.Status.Launcher.PID, nodes[0], stuck.Status.Launcher.PID)
	}
	out, errOut, code = vmctl("drain", nodes[0], "--deadline", "1s")
	t.Logf("vmctl drain --deadline 1s: exit %d\n%s%s", code, out, errOut)
	if code != 4 || !strings.Contains(out, "already tainted") ||
		!strings.Contains(errOut, "1 VMI(s) still there:\n  default/evac-stuck: BLOCKS the drain: evictionStrategy LiveMigrate but the VMI cannot migrate (InterfaceNotLiveMigratable") {
		t.Errorf("second drain: exit %d, want 4 naming evac-stuck and why\n%s%s", code, out, errOut)
	}

	// The migrated VMI got no second evacuation migration (one made from a cache that still
	// showed it on node 1 would wait for a target, and move it back once node 1 is uncordoned).
	var ml vmletv1.VirtualMachineInstanceMigrationList
	if err := c.List(ctx, &ml, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	for _, m := range ml.Items {
		if m.Spec.VMIName == "evac-mig" && m.Name != evac && strings.HasPrefix(m.Name, evacuation.GenerateName) && m.Status.Phase != vmletv1.MigrationFailed {
			t.Errorf("a second evacuation migration %s (phase %s) of evac-mig after %s moved it", m.Name, m.Status.Phase, evac)
		}
	}

	// Drained, node 1 takes nothing: the tie (one VMI each) goes to node 2.
	create(masqueradeVMI("evac-new"))
	if n := scheduledTo("evac-new"); n != nodes[1] {
		t.Errorf("evac-new on %s while %s is drained", n, nodes[0])
	}
	// Uncordoned, it does again (one VMI there, two on node 2); the block is lifted.
	out, errOut, code = vmctl("uncordon", nodes[0])
	if code != 0 || !strings.Contains(out, "uncordoned") {
		t.Fatalf("uncordon: exit %d\n%s%s", code, out, errOut)
	}
	create(masqueradeVMI("evac-after"))
	if n := scheduledTo("evac-after"); n != nodes[0] {
		t.Errorf("evac-after on %s, want %s after uncordon", n, nodes[0])
	}
	running("evac-after")
	waitFor(t, c, client.ObjectKey{Namespace: "default", Name: "evac-stuck"}, time.Minute, "no longer blocked nor marked", func(v *vmletv1.VirtualMachineInstance) bool {
		return !isTrue(v, vmletv1.VirtualMachineInstanceEvacuationBlocked) && v.Status.EvacuationNodeName == ""
	})

	p.interrupt(t)
	s.assertControlPlaneGone(t, 10*time.Second)
	s.assertNodeVMGone(t, vm)
	s.assertFabricGone(t, fabric, plan, uplinkBefore)
}
