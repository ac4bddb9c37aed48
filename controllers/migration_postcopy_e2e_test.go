package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// allowUserfaultfd sets vm.unprivileged_userfaultfd to 1 for the test (the test launchers' QEMU
// is unprivileged and must receive post-copy migrations) and restores it after.
func allowUserfaultfd(t *testing.T) {
	t.Helper()
	const path = "/proc/sys/vm/unprivileged_userfaultfd"
	old, err := os.ReadFile(path)
	if err != nil {
		prereq.Missing(t, "vm.unprivileged_userfaultfd: "+err.Error())
	}
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Error(err)
		}
	})
}

// setPostcopyLabel gives node (created when missing, removed after the test) the node agent's
// post-copy label, as its heartbeat would.
func setPostcopyLabel(t *testing.T, node string, can bool) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{}
	err := env.Client.Get(ctx, client.ObjectKey{Name: node}, n)
	if apierrors.IsNotFound(err) {
		n = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	} else if err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(n.DeepCopy())
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[migration.LabelPostcopy] = controllers.NodeFacts{Postcopy: can}.Labels()[migration.LabelPostcopy]
	if err := env.Client.Patch(ctx, n, patch); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationPostCopy: with allowPostCopy a migration that cannot complete within its
// completion timeout switches to post-copy and succeeds (mode PostCopy, the guest's processes
// survive, the source node is left clean), where the same migration towards a node that cannot
// receive post-copy keeps pre-copy (allowPostCopy recorded false, a PostCopyUnavailable event)
// and is aborted at the completion timeout. When the link stalls in the switch to post-copy, the guest is lost on both nodes: the vmi is Failed
// (MigrationPostCopyFailed) and neither node keeps anything of it; the same when the source's
// agent restarts during post-copy.
func TestMigrationPostCopy(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	allowUserfaultfd(t)
	l := newLink()
	n := startTwoNodes(t, func(m *controllers.MigrationNet) *controllers.MigrationNet { return through(m, l) })
	defer n.stop(t)
	ctx := context.Background()
	// 128 MiB at 8 MiB/s take ≈16 s of pre-copy; the completion timeout is 2 s (for at least
	// 1 GiB). Post-copy has no bandwidth limit.
	const slow = "bandwidthPerMigration: 8Mi\ncompletionTimeoutPerGiB: 2\n"
	setMigrationConfig(t, slow+"allowPostCopy: true\n")
	defer setMigrationConfig(t, "")
	setPostcopyLabel(t, testNode, true)
	setPostcopyLabel(t, secondNode, true)

	vmi := masqueradeVMI("postcopy")
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = mustGetVMI(t, vmi)
	uid := string(vmi.UID)
	pid := guestCounter(t, n.a, vmi, "postcopy")

	t.Run("completes in post-copy", func(t *testing.T) {
		m := migrate(t, vmi, "postcopy")
		ms := m.Status.MigrationState
		if m.Status.Phase != vmletv1.MigrationSucceeded || ms.Mode != vmletv1.MigrationPostCopy || !*ms.MigrationConfiguration.AllowPostCopy {
			t.Fatalf("phase %s, mode %s: %+v", m.Status.Phase, ms.Mode, ms)
		}
		waitEventAbout(t, vmi, "Normal", "MigrationPostCopy")
		assertStaysOn(t, n, vmi, secondNode)
		if got := strings.TrimSpace(guestShell(t, n.b, vmi, "cat /tmp/counter.pid")); got != pid {
			t.Fatalf("counter pid %q on the target, want %s", got, pid)
		}
		guestShell(t, n.b, vmi, "kill -0 "+pid)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("a target without userfaultfd keeps pre-copy", func(t *testing.T) {
		setPostcopyLabel(t, testNode, false)
		defer setPostcopyLabel(t, testNode, true)
		k := startMigration(t, vmi, "no-postcopy")
		failureOf(t, k)
		m := failureReason(t, k, "(completionTimeoutPerGiB)")
		ms := m.Status.MigrationState
		if *ms.MigrationConfiguration.AllowPostCopy || ms.Mode != vmletv1.MigrationPreCopy {
			t.Errorf("allowPostCopy %v, mode %s: want pre-copy aborted at the completion timeout", *ms.MigrationConfiguration.AllowPostCopy, ms.Mode)
		}
		waitEventAbout(t, m, "Warning", migration.ReasonPostCopyUnavailable)
		assertStaysOn(t, n, vmi, secondNode)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("the link stalls in the switch", func(t *testing.T) {
		// Pre-copy stalls (the link is cut once the migration runs, well before the completion
		// timeout of 5 s); at the completion timeout the source switches to post-copy (before
		// the progress timeout of 8 s), whose pages cannot arrive either. The source's bound
		// (completion + 2×progress) ends it: the guest is gone on both sides. At 1 MiB/s the
		// first pass over the guest's memory cannot end before the switch: a pre-copy that
		// reached its last stage first (at 8 MiB/s a loaded CI machine's did) stalls there,
		// with the guest paused on the source and QMP blocked behind the stream, and ends as a
		// failed pre-copy (the guest kept on the source) instead.
		setMigrationConfig(t, "bandwidthPerMigration: 1Mi\ncompletionTimeoutPerGiB: 5\nallowPostCopy: true\nprogressTimeout: 8\n")
		k := startMigration(t, vmi, "stalled")
		waitMigrationPhase(t, k, vmletv1.MigrationRunning)
		l.set(true)
		failureOf(t, k)
		l.set(false)
		if ms := failureReason(t, k, "post-copy failed").Status.MigrationState; ms.Mode != vmletv1.MigrationPostCopy {
			t.Errorf("mode %s: want a failed post-copy", ms.Mode)
		}
		v := mustGetVMI(t, vmi)
		if v.Status.Phase != vmletv1.Failed || v.Status.Reason != string(vmistatus.ReasonMigrationPostCopyFailed) {
			t.Errorf("vmi phase %s reason %s, want Failed %s", v.Status.Phase, v.Status.Reason, vmistatus.ReasonMigrationPostCopyFailed)
		}
		waitEvent(t, vmi, string(vmistatus.ReasonMigrationPostCopyFailed))
		waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, uid)
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
	})

	t.Run("the source agent restarts in post-copy", func(t *testing.T) {
		// As above, but the source's agent restarts while the stalled migration is in
		// post-copy: its relay goes with it, and the new agent finds QEMU in post-copy (not a
		// migration it may cancel and resume): the vmi is Failed, both nodes clean.
		v := masqueradeVMI("postcopy-restart")
		if err := env.Client.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
		vk := client.ObjectKeyFromObject(v)
		defer waitDeleted(t, vk)
		defer func() { _ = env.Client.Delete(ctx, v) }()
		v = waitCondition(t, vk, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
		source := v.Status.NodeName
		k := startMigration(t, v, "postcopy-restart")
		waitMigrationPhase(t, k, vmletv1.MigrationRunning)
		l.set(true)
		eventually(t, 30*time.Second, "the migration in post-copy", func() (bool, string) {
			ms := mustGetVMI(t, v).Status.MigrationState
			return ms != nil && ms.Mode == vmletv1.MigrationPostCopy, fmt.Sprintf("%+v", ms)
		})
		n.restart(t, source)
		l.set(false)
		failureOf(t, k)
		// Whoever sees it first fails the migration (the target, whose stream broke, or the new
		// source agent, which finds QEMU in post-copy); the source then fails the vmi, its word
		// first in the reason.
		var got *vmletv1.VirtualMachineInstance
		eventually(t, 30*time.Second, "the vmi Failed", func() (bool, string) {
			got = mustGetVMI(t, v)
			return got.Status.Phase == vmletv1.Failed, string(got.Status.Phase)
		})
		if got.Status.Reason != string(vmistatus.ReasonMigrationPostCopyFailed) {
			t.Errorf("vmi reason %s, want %s", got.Status.Reason, vmistatus.ReasonMigrationPostCopyFailed)
		}
		if why := got.Status.MigrationState.FailureReason; !strings.HasPrefix(why, "source: post-copy failed") {
			t.Errorf("failure reason %q, want the source's post-copy failure first", why)
		}
		waitLeft(t, n.b, n.dirsB.Net.NetnsDir, n.dirsB.VolumeRoot, string(v.UID))
		waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, string(v.UID))
	})
}
