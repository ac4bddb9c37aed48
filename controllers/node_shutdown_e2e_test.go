package controllers_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestNodeShutdownStuckLauncher: a launcher that does not exit when the node shuts down (here
// stopped with SIGSTOP; on a loaded node, one of many stopping at once) is killed once its
// wait ran out. That is the shutdown's outcome, not its failure: ShutdownNode returns no error
// (`vmlet local` printed one per such VM and exited 1 after Ctrl-C with 100 VMs), the VMI ends
// Failed/NodeShutdown saying what happened, and nothing of it is left.
func TestNodeShutdownStuckLauncher(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	stopped := false
	defer func() {
		if !stopped {
			a.stop(t)
		}
	}()
	ctx := context.Background()
	vmi := newVMI("stuck-shutdown")
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	uid := string(vmi.UID)
	st, err := a.runtime.State(uid)
	if err != nil {
		t.Fatal(err)
	}
	qemuPid := int(vmi.Status.Launcher.PID)
	if err := syscall.Kill(st.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	a.r.ShutdownMargin = time.Second
	if err := a.r.ShutdownNode(ctx); err != nil {
		t.Errorf("ShutdownNode: %v, want no error (the stuck launcher was killed)", err)
	}
	got, err := getVMI(t, key)
	if err != nil {
		t.Fatal(err)
	}
	c := meta.FindStatusCondition(got.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	if got.Status.Phase != vmletv1.Failed || c == nil || c.Reason != string(vmistatus.ReasonNodeShutdown) || !strings.Contains(c.Message, "had not exited after 1s: it was killed") {
		t.Errorf("after the shutdown: %s", summary(got))
	}
	for _, pid := range []int{st.Pid, qemuPid} {
		poll.Until(t, 10*time.Second, "killed process reaped", func() (bool, string) { return !poll.Alive(pid), "alive" })
	}
	assertNothingLeft(t, uid)

	// The drained agent does no more; a new one lets the Failed VMI go.
	a.stop(t)
	stopped = true
	b := startAgent(t, agentOptions{})
	defer b.stop(t)
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
}
