package realclustere2e_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/migrationca"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/realcluster"
)

// migratableSpec is masqueradeSpec that tolerates the second node's taint: the one VMI shape
// that may run on either node.
const migratableSpec = masqueradeSpec + `  tolerations:
  - {key: ` + realcluster.SecondaryNodeTaintKey + `, operator: Exists, effect: NoSchedule}
`

// TestMigrationNowhereToGo: a VMI that does not tolerate the second node's taint has nowhere
// to migrate. `kubectl create` of a VirtualMachineInstanceMigration gets a target launcher pod
// that the real kube-scheduler keeps off the source node and off the tainted one (it says so:
// the migration's TargetScheduled condition carries its message), the deployed controller made
// the migration CA Secret (its RBAC allows it), and deleting the migration removes the target
// pod while the guest runs on.
func TestMigrationNowhereToGo(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "migr", masqueradeSpec)
	ctx := context.Background()
	if err := kc.Get(ctx, client.ObjectKey{Namespace: migrationca.Namespace, Name: migrationca.SecretName}, &corev1.Secret{}); err != nil {
		t.Errorf("migration CA Secret %s/%s: %v", migrationca.Namespace, migrationca.SecretName, err)
	}
	waitVMI(t, b.name, time.Minute, "LiveMigratable", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, string(vmletv1.VirtualMachineInstanceIsMigratable))
	})
	name := b.name + "-m"
	m := createMigration(t, name, b.name)
	key := client.ObjectKeyFromObject(m)
	poll.Until(t, 2*time.Minute, name+": the scheduler's word on its target", func() (bool, string) {
		if err := kc.Get(ctx, key, m); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(m.Status.Conditions, "TargetScheduled")
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "node affinity") && strings.Contains(c.Message, "untolerated taint"),
			fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
	})
	var pods corev1.PodList
	if err := kc.List(ctx, &pods, client.InNamespace("default"), client.MatchingLabels{launcherpod.LabelMigrationUID: string(m.UID)}); err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != "" || pods.Items[0].Name == b.pod.Name {
		t.Fatalf("target pods %+v, want one pending", pods.Items)
	}
	target := pods.Items[0]
	if got := m.Status.Phase; got != vmletv1.MigrationScheduling {
		t.Errorf("phase %s, want %s (kept until %s)", got, vmletv1.MigrationScheduling, migration.SchedulingTimeout)
	}
	kubectl(t, "", "delete", "vmim", name, "-n", "default", "--wait", "--timeout=2m")
	poll.Until(t, time.Minute, "target pod "+target.Name+" deleted", func() (bool, string) {
		err := kc.Get(ctx, client.ObjectKeyFromObject(&target), &corev1.Pod{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	v := getVMI(t, b.name)
	if v.Status.Phase != vmletv1.Running || v.Status.NodeName != cl.NodeName || v.Status.Launcher == nil || v.Status.Launcher.Pod != b.pod.Name {
		t.Errorf("after the migration's deletion: %s, launcher %+v", summary(v), v.Status.Launcher)
	}
	deleteVMI(t, b.name)
	assertGone(t, b.fp)
}

// TestMigrationBetweenNodes: live migration between two real kubelets. A masquerade VMI that
// may run on either node boots; a process in its guest counts and a server answers on its
// declared port. `kubectl create` of a VirtualMachineInstanceMigration moves it to the other
// node (and `kubectl delete` of it as soon as the VMI says it completed leaves the guest be)
// and a second one back again: each time kube-scheduler places the target launcher pod on
// the other node, its containerd and kubelet run it, the two agents (DaemonSet pods) relay the
// guest between their pod addresses in TLS, the VMI follows (status.nodeName, launcher pod and
// PID, the new pod's address), the counter process keeps counting (memory came along), the port
// answers at the new pod's address, and the source node keeps nothing of the VM (QEMU, run and
// volume folders, pod cgroups, device programs, network namespace).
func TestMigrationBetweenNodes(t *testing.T) {
	need(t)
	t.Parallel()
	b := boot(t, "mig2", migratableSpec)
	ctx := context.Background()
	ready := waitVMI(t, b.name, time.Minute, "LiveMigratable with an address", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, string(vmletv1.VirtualMachineInstanceIsMigratable)) && len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != ""
	})
	pid := guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $!")
	token := "vmlet-" + suffix()
	guestShell(t, ready, "nc -ll -p 8080 -e echo "+token+" </dev/null >/dev/null 2>&1 &")
	waitServed(t, b.pod, token)

	from, fromPod, fromFp := ready, b.pod, b.fp
	for i := range 2 {
		to := cl.Nodes[1].Name
		if from.Status.NodeName == to {
			to = cl.Nodes[0].Name
		}
		before := guestCount(t, from)
		t0 := time.Now()
		m := createMigration(t, fmt.Sprintf("%s-%d", b.name, i), b.name)
		if i == 0 {
			// A user tidying up: the migration deleted as soon as the VMI says it completed
			// (before the migration itself says Succeeded) must not take the guest's new pod.
			waitVMI(t, b.name, 4*time.Minute, m.Name+" completed", func(v *vmletv1.VirtualMachineInstance) bool {
				ms := v.Status.MigrationState
				if ms != nil && ms.MigrationUID == m.UID && ms.Failed {
					t.Fatalf("%s failed: %+v", m.Name, ms)
				}
				return ms != nil && ms.MigrationUID == m.UID && ms.Completed
			})
			kubectl(t, "", "delete", "vmim", m.Name, "-n", "default", "--wait", "--timeout=1m")
		} else {
			poll.Until(t, 4*time.Minute, m.Name+" Succeeded", func() (bool, string) {
				if err := kc.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
					return false, err.Error()
				}
				if m.Status.Phase == vmletv1.MigrationFailed {
					t.Fatalf("%s failed: %+v", m.Name, m.Status.MigrationState)
				}
				return m.Status.Phase == vmletv1.MigrationSucceeded, fmt.Sprintf("phase %s conditions %+v", m.Status.Phase, m.Status.Conditions)
			})
		}
		v := waitVMI(t, b.name, time.Minute, "on "+to+" with its new pod and address", func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.NodeName == to && v.Status.Launcher != nil && v.Status.Launcher.Pod != fromPod.Name &&
				len(v.Status.Interfaces) > 0 && v.Status.Interfaces[0].IP != "" && v.Status.Interfaces[0].IP != from.Status.Interfaces[0].IP &&
				conditionTrue(v, string(vmletv1.VirtualMachineInstanceReady))
		})
		t.Logf("%s: %s → %s in %s (created → Succeeded, VMI updated)", m.Name, from.Status.NodeName, to, time.Since(t0).Round(time.Millisecond))
		ms := v.Status.MigrationState
		if ms == nil || !ms.Completed || ms.Failed || ms.SourceNode != from.Status.NodeName || ms.TargetNode != to ||
			ms.SourcePod != fromPod.Name || ms.TargetPod != v.Status.Launcher.Pod || ms.TargetNodeAddress == "" {
			t.Errorf("migrationState after %s: %+v", m.Name, ms)
		}
		if v.Status.Phase != vmletv1.Running {
			t.Errorf("VMI phase %s after %s", v.Status.Phase, m.Name)
		}
		pod := launcherPodNamed(t, v.Status.Launcher.Pod)
		if pod.Spec.NodeName != to || pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP != v.Status.Interfaces[0].IP {
			t.Errorf("launcher pod %s on %s, %s, IP %s; want Running on %s with the VMI's address %s", pod.Name, pod.Spec.NodeName,
				pod.Status.Phase, pod.Status.PodIP, to, v.Status.Interfaces[0].IP)
		}
		fp := nodeFootprint(t, v, pod) // QEMU on the target node, in the new pod, under a device program
		if fp.qemuPid == fromFp.qemuPid && fp.qemuStart == fromFp.qemuStart {
			t.Errorf("QEMU %d is the source's", fp.qemuPid)
		}
		// The guest's memory came along: the same counter process, still counting.
		if got := guestShell(t, v, "cat /proc/"+pid+"/cmdline >/dev/null && echo ok"); got != "ok" {
			t.Fatalf("counter process %s gone after %s", pid, m.Name)
		}
		poll.Until(t, 30*time.Second, "the counter counting on "+to, func() (bool, string) {
			n := guestCount(t, v)
			return n > before, fmt.Sprintf("count %d, was %d before the migration", n, before)
		})
		waitServed(t, pod, token)
		poll.Until(t, time.Minute, "source pod "+fromPod.Name+" deleted", func() (bool, string) {
			err := kc.Get(ctx, client.ObjectKeyFromObject(fromPod), &corev1.Pod{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		assertGone(t, fromFp)
		from, fromPod, fromFp = v, pod, fp
	}
	deleteVMI(t, b.name)
	assertGone(t, fromFp)
}

// createMigration creates a VirtualMachineInstanceMigration of vmi with kubectl, as a user
// would; finished migrations are kept, so the test deletes it when it ends.
func createMigration(t testing.TB, name, vmi string) *vmletv1.VirtualMachineInstanceMigration {
	t.Helper()
	kubectl(t, "apiVersion: vmlet.dev/v1alpha1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: "+name+
		"\n  namespace: default\nspec:\n  vmiName: "+vmi+"\n", "create", "-f", "-")
	t.Cleanup(func() {
		_ = kc.Delete(context.Background(), &vmletv1.VirtualMachineInstanceMigration{ObjectMeta: objMeta(name)})
	})
	m := &vmletv1.VirtualMachineInstanceMigration{}
	if err := kc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func launcherPodNamed(t testing.TB, name string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{}
	if err := kc.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return pod
}

// guestShell runs cmd in v's guest through its launcher's guest agent (the launcher's socket
// on v's node, a hostPath) and returns its output, trimmed; it waits (30 s) for the agent to
// connect (after a migration the target's reconnects) and fails the test on a non-zero exit.
func guestShell(t testing.TB, v *vmletv1.VirtualMachineInstance, cmd string) string {
	t.Helper()
	sock := launcherpod.HostSocket(node(t, v.Status.NodeName).HostPath(launcherRoot), v.UID)
	var out string
	poll.Until(t, 30*time.Second, "guest exec "+cmd+" on "+v.Status.NodeName, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lc, err := launcher.Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		defer lc.Close()
		r, err := lc.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 20*time.Second)
		if errors.Is(err, launcher.ErrAgentNotConnected) {
			return false, err.Error()
		}
		if err != nil {
			t.Fatalf("guest exec %q on %s: %v", cmd, v.Status.NodeName, err)
		}
		if r.ExitCode != 0 {
			t.Fatalf("guest exec %q on %s: exit %d: %s", cmd, v.Status.NodeName, r.ExitCode, r.Stderr)
		}
		out = strings.TrimSpace(string(r.Stdout))
		return true, ""
	})
	return out
}

// guestCount reads the guest's counter (/tmp/count).
func guestCount(t testing.TB, v *vmletv1.VirtualMachineInstance) int {
	t.Helper()
	s := guestShell(t, v, "cat /tmp/count")
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("guest counter %q: %v", s, err)
	}
	return n
}

// waitServed waits until port 8080 at pod's address answers token (this machine is on the pod
// network's bridge).
func waitServed(t testing.TB, pod *corev1.Pod, token string) {
	t.Helper()
	addr := net.JoinHostPort(pod.Status.PodIP, "8080")
	poll.Until(t, time.Minute, addr+" answering", func() (bool, string) { return answers(addr, token) })
}

// answers connects to addr and says whether what it reads there (the guest's server's answer,
// until it closes) is token, and what it read.
func answers(addr, token string) (bool, string) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(conn)
	return strings.TrimSpace(string(b)) == token, fmt.Sprintf("%q", b)
}

// TestMigrationFaults: migrations between the two kubelets slowed to 1 MiB/s by a
// MigrationPolicy that selects only this test's VMI are (1) aborted by `kubectl delete` of the
// VirtualMachineInstanceMigration mid-stream, (2) failed by SIGKILLing the target launcher
// pod's processes mid-stream and (3) failed by deleting the target node's agent pod mid-stream
// (its relays go with it; the DaemonSet's new agent makes no second target). Each time the guest
// keeps running on its node in its pod, its counter counting, the migration says how it ended,
// the target pod is deleted and the target node keeps nothing of the VMI (run and volume
// folders, pod cgroups). Not parallel: an agent of the cluster restarts.
func TestMigrationFaults(t *testing.T) {
	need(t)
	label := "slow-" + suffix()
	kubectl(t, "apiVersion: migrations.vmlet.dev/v1alpha1\nkind: MigrationPolicy\nmetadata:\n  name: "+label+
		"\nspec:\n  selectors:\n    virtualMachineInstanceSelector:\n      vmlet.dev/e2e: "+label+"\n  bandwidthPerMigration: 1Mi\n", "create", "-f", "-")
	t.Cleanup(func() { kubectl(t, "", "delete", "migrationpolicy", label, "--ignore-not-found") })
	// The labels continue createVMI's metadata block.
	b := boot(t, "migf", "  labels: {vmlet.dev/e2e: "+label+"}\n"+migratableSpec)
	ctx := context.Background()
	ready := waitVMI(t, b.name, time.Minute, "LiveMigratable", func(v *vmletv1.VirtualMachineInstance) bool {
		return conditionTrue(v, string(vmletv1.VirtualMachineInstanceIsMigratable))
	})
	guestShell(t, ready, "(i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &")
	source := ready.Status.NodeName
	other := cl.Nodes[1].Name
	if source == other {
		other = cl.Nodes[0].Name
	}

	// streaming creates migration name and waits until its stream flows; it returns the
	// migration and its target launcher pod.
	streaming := func(t *testing.T, name string) (*vmletv1.VirtualMachineInstanceMigration, *corev1.Pod) {
		t.Helper()
		m := createMigration(t, name, b.name)
		v := waitVMI(t, b.name, 2*time.Minute, "streaming to "+other, func(v *vmletv1.VirtualMachineInstance) bool {
			ms := v.Status.MigrationState
			return ms != nil && ms.MigrationUID == m.UID && ms.Progress != nil && ms.Progress.DataProcessedBytes > 0 && !ms.Completed && !ms.Failed
		})
		if got := v.Status.MigrationState.MigrationConfiguration; got == nil || got.BandwidthPerMigration == nil || got.BandwidthPerMigration.String() != "1Mi" {
			t.Errorf("migration configuration %+v, want the policy's bandwidthPerMigration 1Mi", got)
		}
		pod := launcherPodNamed(t, v.Status.MigrationState.TargetPod)
		if pod.Spec.NodeName != other {
			t.Fatalf("target pod %s on %q, want %s", pod.Name, pod.Spec.NodeName, other)
		}
		return m, pod
	}
	// stays checks that the guest runs on where it was, in its pod, counting, and that the
	// target pod and everything of the VMI on the other node are gone.
	stays := func(t *testing.T, target *corev1.Pod) {
		t.Helper()
		v := waitVMI(t, b.name, time.Minute, "Ready on "+source, func(v *vmletv1.VirtualMachineInstance) bool {
			return v.Status.NodeName == source && conditionTrue(v, string(vmletv1.VirtualMachineInstanceReady))
		})
		if v.Status.Phase != vmletv1.Running || v.Status.Launcher == nil || v.Status.Launcher.Pod != b.pod.Name || int(v.Status.Launcher.PID) != b.fp.qemuPid {
			t.Errorf("VMI %s, launcher %+v; want Running in %s, QEMU %d", v.Status.Phase, v.Status.Launcher, b.pod.Name, b.fp.qemuPid)
		}
		before := guestCount(t, v)
		poll.Until(t, 30*time.Second, "the counter counting on "+source, func() (bool, string) {
			n := guestCount(t, v)
			return n > before, fmt.Sprintf("count %d, was %d", n, before)
		})
		n := node(t, other)
		poll.Until(t, time.Minute, other+" clean of "+b.name, func() (bool, string) {
			if err := kc.Get(ctx, client.ObjectKeyFromObject(target), &corev1.Pod{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("target pod %s: %v", target.Name, err)
			}
			left := podCgroups(string(target.UID))
			for _, d := range []string{launcherpod.HostRunDir(n.HostPath(launcherRoot), v.UID), launcherpod.HostVolumeDir(n.HostPath(volumeRoot), v.UID)} {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					left = append(left, d)
				}
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
	}

	t.Run("deleting the migration aborts it", func(t *testing.T) {
		m, target := streaming(t, b.name+"-abort")
		kubectl(t, "", "delete", "vmim", m.Name, "-n", "default", "--wait", "--timeout=2m")
		v := waitVMI(t, b.name, time.Minute, "abort recorded", func(v *vmletv1.VirtualMachineInstance) bool {
			ms := v.Status.MigrationState
			return ms != nil && ms.MigrationUID == m.UID && ms.AbortRequested && ms.AbortStatus != ""
		})
		if ms := v.Status.MigrationState; ms.AbortStatus != vmletv1.MigrationAbortSucceeded || ms.Completed {
			t.Errorf("migrationState after the abort: %+v", ms)
		}
		stays(t, target)
	})

	t.Run("the target launcher is killed", func(t *testing.T) {
		m, target := streaming(t, b.name+"-killed")
		pids := podProcesses(string(target.UID))
		if len(pids) == 0 {
			t.Fatalf("no process in target pod %s's cgroups", target.Name)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		poll.Until(t, 2*time.Minute, "migration Failed", func() (bool, string) {
			if err := kc.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return false, err.Error()
			}
			return m.Status.Phase == vmletv1.MigrationFailed, string(m.Status.Phase)
		})
		if ms := m.Status.MigrationState; ms == nil || !ms.Failed || !strings.Contains(ms.FailureReason, "target") {
			t.Errorf("migrationState: %+v; want failed, the reason naming the target", ms)
		} else {
			t.Logf("failure reason: %s", ms.FailureReason)
		}
		stays(t, target)
	})

	t.Run("the target's agent pod is deleted", func(t *testing.T) {
		m, target := streaming(t, b.name+"-agent")
		old := agentPodOn(t, other)
		if old == nil {
			t.Fatalf("no agent pod on %s", other)
		}
		kubectl(t, "", "delete", "pod", "-n", "vmlet-system", old.Name, "--wait", "--timeout=2m")
		poll.Until(t, 3*time.Minute, "migration Failed", func() (bool, string) {
			if err := kc.Get(ctx, client.ObjectKeyFromObject(m), m); err != nil {
				return false, err.Error()
			}
			return m.Status.Phase == vmletv1.MigrationFailed, string(m.Status.Phase)
		})
		if ms := m.Status.MigrationState; ms == nil || !ms.Failed || ms.FailureReason == "" {
			t.Errorf("migrationState: %+v; want failed with a reason", ms)
		} else {
			t.Logf("failure reason: %s", ms.FailureReason)
		}
		poll.Until(t, 3*time.Minute, "a new agent pod Ready on "+other, func() (bool, string) {
			now := agentPodOn(t, other)
			return now != nil && now.UID != old.UID && podReady(now), fmt.Sprint(now != nil)
		})
		stays(t, target)
		var pods corev1.PodList
		if err := kc.List(ctx, &pods, client.InNamespace("default"), launcherpod.MatchingVMI(b.vmi.UID)); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 || pods.Items[0].Name != b.pod.Name {
			t.Errorf("launcher pods of the VMI: %d, want only the source's %s", len(pods.Items), b.pod.Name)
		}
	})
	deleteVMI(t, b.name)
	assertGone(t, b.fp)
}

// podCgroups lists the pod's cgroup folders (pod<uid>) below the cluster's cgroup root in the
// unified and the v1 memory hierarchies.
func podCgroups(podUID string) []string {
	var out []string
	for _, h := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory"} {
		_ = filepath.WalkDir(filepath.Join(h, realcluster.CgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && (d.Name() == "pod"+podUID || d.Name() == "pod"+strings.ReplaceAll(podUID, "-", "_")) {
				out = append(out, p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// podProcesses are the processes in the pod's unified cgroup (its containers and sandbox).
func podProcesses(podUID string) []int {
	var pids []int
	for _, d := range podCgroups(podUID) {
		if !strings.HasPrefix(d, "/sys/fs/cgroup/unified/") {
			continue
		}
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || e.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}
