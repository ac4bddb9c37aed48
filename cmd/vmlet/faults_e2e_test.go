package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/figure"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// faultRow is one fault of TestFaultMatrix: inject runs it on a VM whose agent, launcher and
// QEMU are real processes on a real API server, and checks the VMI's defined outcome.
type faultRow struct {
	name string
	// ownAPI: the row stops the API server, so it gets one of its own.
	ownAPI bool
	// waitRunning: inject starts once the VMI is Ready and its guest booted.
	waitRunning bool
	inject      func(t *testing.T, f *faultVM)
	// deletes: inject deleted the VMI itself.
	deletes bool
	// setup, if set, prepares the row before its agent starts: the VMI to create, more agent
	// flags (f.s.extraArgs), the first agent's environment (f.agentEnv).
	setup func(t *testing.T, f *faultVM, vmi *vmletv1.VirtualMachineInstance)
}

// faultTally counts what the matrix did, for its summary line: faults injected, those whose
// row passed (the VMI reached its defined state), VMs lost (a VM that should have run on
// with another or no QEMU), and leaks the audit found after deletion.
type faultTally struct{ injected, survived, lost, leaks atomic.Int64 }

// faultVM is one row's node (agent process, folders) and VMI.
type faultVM struct {
	s       *agentSetup
	a       *agentProc
	tally   *faultTally
	key     client.ObjectKey
	uid     string
	runDir  string
	qemuPid int
	// injected is how many faults this row injected.
	injected int64
	// agentEnv is the environment the row's first agent starts with (after s.start: none).
	agentEnv []string
}

// Rows not here, and where they are covered:
//   - launcher SIGKILL while the guest runs: controllers TestVMILauncherKilled (QEMU goes with
//     it by Pdeathsig, Failed/LauncherKilled, nothing left) and cluster mode's launcher pod
//     exit (test/clustere2e);
//   - QEMU SIGKILL: controllers TestVMIQEMUKilled and clustere2e TestClusterQEMUKilled
//     (Failed/QEMUDied, nothing left);
//   - agent SIGKILL while the VM just runs, with a pause patched while no agent runs:
//     TestAgentKill9.
//
// The agent-kill rows of storage, hotplug and teardown are in faults_agentkill_e2e_test.go.
//
// A guest kernel panic is injected (guest-panic, faults_panic_e2e_test.go) on a VMI with a
// panic device, the only way a guest tells the host; a guest without one reboots by its own
// panic= setting and the VMI runs on (controllers TestVMIGuestPanicWithoutPanicDevice).
var faultRows = []faultRow{
	imagePullRow(),
	imagePullDeletedRow(),
	storagePrepRow(),
	{name: "agent-kill/launcher-start", inject: agentKillDuringLauncherStart},
	diskHotplugRow(),
	nicHotplugRow(),
	teardownRow(),
	bridgeDeletedRow(),
	otherSubnetRow(),
	{name: "agent-kill/pause", waitRunning: true, inject: agentKillDuringPause},
	{name: "agent-kill/graceful-shutdown", waitRunning: true, inject: agentKillDuringShutdown, deletes: true},
	{name: "qemu-sigstop", waitRunning: true, inject: qemuStopped},
	{name: "apiserver-etcd", ownAPI: true, waitRunning: true, inject: controlPlaneFaults},
	{name: "guest-panic", waitRunning: true, inject: guestPanic, setup: withPanicDevice},
}

// TestFaultMatrix injects real process faults (SIGKILL of the node agent at named moments,
// SIGSTOP of QEMU, a guest kernel panic, kube-apiserver restarted and down for 60 s, etcd
// restarted) into VMs run by separate `vmlet agent` processes, checks each VMI's defined
// outcome (running VMs keep the same QEMU, no second launcher, status catches up), and after
// deleting each VMI audits the node for leaks. It prints one summary line.
func TestFaultMatrix(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	env := startEnv(t)
	bin, err := os.MkdirTemp("", "vmlet-faults-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(bin) })
	if err := os.Chmod(bin, 0o755); err != nil { // the launchers' user execs from it
		t.Fatal(err)
	}
	buildBinaries(t, bin)
	start := time.Now()
	var tally faultTally
	t.Run("rows", func(t *testing.T) {
		for i, r := range faultRows {
			t.Run(r.name, func(t *testing.T) {
				t.Parallel()
				e := env
				if r.ownAPI {
					e = startEnv(t)
				}
				runFaultRow(t, r, newSetupOn(t, e, fmt.Sprintf("fault-%d", i), bin), &tally)
			})
		}
	})
	figure.Report(t, "fault matrix: %d faults injected, %d survived with %d VMs lost, %d leaks (%d rows, %s)",
		tally.injected.Load(), tally.survived.Load(), tally.lost.Load(), tally.leaks.Load(), len(faultRows),
		time.Since(start).Round(time.Second))
}

func runFaultRow(t *testing.T, r faultRow, s *agentSetup, tally *faultTally) {
	ctx := context.Background()
	c := s.env.Client
	f := &faultVM{s: s, tally: tally}
	vmi := guestvmi.VMI(strings.ReplaceAll(r.name, "/", "-"), guestImage)
	if r.setup != nil {
		r.setup(t, f, vmi)
	}
	f.a = s.startWith(t, f.agentEnv)
	t.Cleanup(func() {
		f.a.stop(t)
		if t.Failed() {
			t.Logf("agent output:\n%s", tailOf(f.a.out.String()))
		}
	})
	if err := c.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	f.key, f.uid = client.ObjectKeyFromObject(vmi), string(vmi.UID)
	f.runDir = filepath.Join(s.runRoot, f.uid)
	t.Cleanup(func() { // a failed row leaves no VM behind: deleted, or its launcher killed
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, f.key, v); err != nil {
			return
		}
		_ = c.Delete(ctx, v)
		poll.Until(t, 2*time.Minute, "the row's VMI deleted", func() (bool, string) {
			err := c.Get(ctx, f.key, v)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		for _, pid := range launcherPids(t, f.runDir) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(f.runDir, "logs", "serial.log"))
			q, _ := os.ReadFile(filepath.Join(f.runDir, "logs", "qmp.log"))
			v := &vmletv1.VirtualMachineInstance{}
			_ = c.Get(ctx, f.key, v)
			t.Logf("serial log:\n%s\nQMP log:\n%s\nstatus: %+v", tailOf(string(b)), tailOf(string(q)), v.Status)
		}
	})
	// Stand in for the scheduler (the cluster controller does this from the launcher pod).
	vmi.Status.NodeName, vmi.Status.Phase = s.node, vmletv1.Scheduled
	if err := c.Status().Update(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	if r.waitRunning {
		f.qemuPid = f.waitRunning(t)
	}
	r.inject(t, f)
	if !r.deletes {
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(ctx, f.key, v); err != nil {
			t.Fatal(err)
		}
		if v.Status.Launcher != nil {
			f.qemuPid = int(v.Status.Launcher.PID)
		}
		if err := c.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	f.waitDeleted(t)
	leaks := s.assertNothingLeft(t, f.uid, f.qemuPid)
	tally.leaks.Add(int64(leaks))
	if !t.Failed() {
		tally.survived.Add(f.injected)
	}
}

// waitRunning waits until the VMI is Ready with one launcher and its guest booted; it returns
// the QEMU pid.
func (f *faultVM) waitRunning(t *testing.T) int {
	t.Helper()
	v := waitFor(t, f.s.env.Client, f.key, 4*time.Minute, "Ready", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) && v.Status.Launcher != nil
	})
	waitFile(t, filepath.Join(f.runDir, "logs", "serial.log"), testguest.MarkerReady, 3*time.Minute)
	if n := launchersFor(t, f.runDir); n != 1 {
		t.Fatalf("%d launchers for %s, want 1", n, f.runDir)
	}
	return int(v.Status.Launcher.PID)
}

// killAgent is the fault: SIGKILL of the node agent, counted.
func (f *faultVM) killAgent(t *testing.T) {
	t.Helper()
	f.a.kill9(t)
	f.inject()
}

// inject counts one fault injected.
func (f *faultVM) inject() {
	f.injected++
	f.tally.injected.Add(1)
}

// keptVM checks that the VM survived with the same QEMU and one launcher; a different or dead
// QEMU counts as a lost VM.
func (f *faultVM) keptVM(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	if v.Status.Launcher == nil || int(v.Status.Launcher.PID) != f.qemuPid || !poll.Alive(f.qemuPid) {
		f.tally.lost.Add(1)
		t.Errorf("VM lost: QEMU %d (alive %v), status.launcher %+v", f.qemuPid, poll.Alive(f.qemuPid), v.Status.Launcher)
	}
	if n := launchersFor(t, f.runDir); n != 1 {
		t.Errorf("%d launchers for %s, want 1", n, f.runDir)
	}
}

func (f *faultVM) waitDeleted(t *testing.T) {
	t.Helper()
	poll.Until(t, 3*time.Minute, f.key.Name+" deleted", func() (bool, string) {
		v := &vmletv1.VirtualMachineInstance{}
		err := f.s.env.Client.Get(context.Background(), f.key, v)
		return apierrors.IsNotFound(err), fmt.Sprintf("%v, phase %s, conditions %+v", err, v.Status.Phase, v.Status.Conditions)
	})
}

// qmpCount is how many lines of the launcher's QMP log contain s.
func (f *faultVM) qmpCount(s string) int {
	b, _ := os.ReadFile(filepath.Join(f.runDir, "logs", "qmp.log"))
	return strings.Count(string(b), s)
}

// waitQMP waits until the QMP log holds more than n lines with s: the launcher sent it.
func (f *faultVM) waitQMP(t *testing.T, s string, n int) {
	t.Helper()
	poll.Until(t, 2*time.Minute, fmt.Sprintf("%s in the QMP log", s), func() (bool, string) {
		return f.qmpCount(s) > n, fmt.Sprint(f.qmpCount(s))
	})
}

func (f *faultVM) ready(t *testing.T, d time.Duration, what string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	return waitFor(t, f.s.env.Client, f.key, d, what, func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Running && meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			!meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused)
	})
}

func (f *faultVM) paused(t *testing.T, d time.Duration, what string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	return waitFor(t, f.s.env.Client, f.key, d, what, func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstancePaused)
	})
}

// agentKillDuringLauncherStart: the sign is the VMI's launcher process appearing and recorded
// (launcher.pid names it); the restarted agent adopts that launcher (no second one) and the
// start completes. (A launcher the agent was killed before recording is not adopted but
// replaced, its cgroup removed: process TestStartAfterKilledMidStart.)
func agentKillDuringLauncherStart(t *testing.T, f *faultVM) {
	var pids []int
	poll.Until(t, 3*time.Minute, "launcher process for "+f.runDir+", recorded", func() (bool, string) {
		pids = launcherPids(t, f.runDir)
		b, _ := os.ReadFile(filepath.Join(f.runDir, "launcher.pid"))
		return len(pids) == 1 && string(b) == strconv.Itoa(pids[0]), fmt.Sprintf("launchers %v, launcher.pid %q", pids, b)
	})
	f.killAgent(t)
	f.a = f.s.start(t)
	f.qemuPid = f.waitRunning(t)
	if got := launcherPids(t, f.runDir); len(got) != 1 || got[0] != pids[0] {
		t.Errorf("launchers after restart %v, want the one that was starting (%d)", got, pids[0])
	}
}

// agentKillDuringPause: the sign is the launcher's QMP stop; the restarted agent reports the VM
// Paused (same QEMU) and unpauses it.
func agentKillDuringPause(t *testing.T, f *faultVM) {
	n := f.qmpCount(`"execute":"stop"`)
	patchPaused(t, f.s.env.Client, f.key, true)
	f.waitQMP(t, `"execute":"stop"`, n)
	f.killAgent(t)
	f.a = f.s.start(t)
	f.keptVM(t, f.paused(t, 2*time.Minute, "Paused after restart"))
	patchPaused(t, f.s.env.Client, f.key, false)
	f.keptVM(t, f.ready(t, 2*time.Minute, "Ready after unpause"))
}

// agentKillDuringShutdown: the VMI deleted, the sign is the launcher's QMP system_powerdown
// (the graceful shutdown runs); the restarted agent finishes the deletion.
func agentKillDuringShutdown(t *testing.T, f *faultVM) {
	v := &vmletv1.VirtualMachineInstance{}
	if err := f.s.env.Client.Get(context.Background(), f.key, v); err != nil {
		t.Fatal(err)
	}
	n := f.qmpCount(`"execute":"system_powerdown"`)
	if err := f.s.env.Client.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	f.waitQMP(t, `"execute":"system_powerdown"`, n)
	f.killAgent(t)
	f.a = f.s.start(t)
}

// qemuStopped: QEMU SIGSTOPped for longer than the QMP deadline (30 s) while a pause is asked:
// the agent says the VM is not synchronized (not hang), and after SIGCONT applies the pause
// to the same QEMU.
func qemuStopped(t *testing.T, f *faultVM) {
	if err := syscall.Kill(f.qemuPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	f.inject()
	cont := func() { _ = syscall.Kill(f.qemuPid, syscall.SIGCONT) }
	defer cont()
	patchPaused(t, f.s.env.Client, f.key, true)
	hung := waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "Synchronized=False for the hung QEMU", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionFalse(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	})
	c := meta.FindStatusCondition(hung.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	t.Logf("hung QEMU reported: %s: %s", c.Reason, c.Message)
	cont()
	f.keptVM(t, f.paused(t, 2*time.Minute, "Paused after SIGCONT"))
	patchPaused(t, f.s.env.Client, f.key, false)
	v := f.ready(t, 2*time.Minute, "Ready after unpause")
	f.keptVM(t, v)
	if !meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized) {
		f.ready(t, time.Minute, "Synchronized again") // re-read: the condition may trail
	}
}

// controlPlaneFaults: kube-apiserver restarted, then down for 60 s, then etcd restarted, all
// while the VM runs: the VM keeps running (same QEMU, one launcher) and after each fault a
// spec change is applied and the conditions are current.
func controlPlaneFaults(t *testing.T, f *faultVM) {
	env := f.s.env
	toggle := func(paused bool, after string) {
		t.Helper()
		patchPausedRetry(t, env.Client, f.key, paused)
		if paused {
			f.keptVM(t, f.paused(t, 2*time.Minute, "Paused after "+after))
		} else {
			f.keptVM(t, f.ready(t, 2*time.Minute, "Ready after "+after))
		}
	}
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	f.inject()
	toggle(true, "an API server restart")

	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	f.inject()
	// The fault lasts 60 s; the VM must run through all of it.
	down := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for ; time.Since(down) < 60*time.Second; <-tick.C {
		if !poll.Alive(f.qemuPid) || launchersFor(t, f.runDir) != 1 {
			t.Fatalf("VM lost %s into the API server's downtime: QEMU alive %v, launchers %d", time.Since(down).Round(time.Second),
				poll.Alive(f.qemuPid), launchersFor(t, f.runDir))
		}
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	toggle(false, "60 s without an API server")

	if err := env.RestartEtcd(); err != nil {
		t.Fatal(err)
	}
	f.inject()
	toggle(true, "an etcd restart")
}

// patchPausedRetry is patchPaused for a control plane that is coming back: it retries until
// the API server takes the patch.
func patchPausedRetry(t *testing.T, c client.Client, key client.ObjectKey, paused bool) {
	t.Helper()
	poll.Until(t, time.Minute, fmt.Sprintf("spec.paused=%v patched", paused), func() (bool, string) {
		v := &vmletv1.VirtualMachineInstance{}
		if err := c.Get(context.Background(), key, v); err != nil {
			return false, err.Error()
		}
		p := client.MergeFrom(v.DeepCopy())
		v.Spec.Paused = paused
		err := c.Patch(context.Background(), v, p)
		return err == nil, fmt.Sprint(err)
	})
}
