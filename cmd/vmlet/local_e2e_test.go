package main_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestLocalNodeShutdown: Ctrl-C of `vmlet local` is a graceful node shutdown. Both running VMIs
// (the demo and another one) end Failed with reason NodeShutdown, Ready=False and a Warning
// Event, and nothing of them is left on the node, nor of the node (run root, cgroups); the
// control plane is gone. The next start
// deletes the final demo VMI and creates it again, and it runs; the other VMI stays Failed.
// The Node is Ready=True (VmletReady) while vmlet runs, Ready=False (NodeShutdown) after.
func TestLocalNodeShutdown(t *testing.T) {
	s := newLocalSetup(t)
	ctx := context.Background()
	p := s.start(t)
	p.waitOutput(t, runningMsg, 4*time.Minute)
	line := lineWith(p.out.String(), runningMsg)
	if !strings.Contains(line, "accelerator ") || strings.Contains(line, `reason ""`) || strings.Contains(line, `""`) {
		t.Errorf("summary line %q: want the accelerator and nothing empty", line)
	}
	c := s.client(t)
	assertNodeReady(t, c)
	assertLocalEndpoints(t, p, c)
	extra := guestvmi.VMI("extra", demoImage)
	if err := c.Create(ctx, extra); err != nil {
		t.Fatal(err)
	}
	demo, other := s.running(t, c, "demo"), s.running(t, c, "extra")
	s.assertCPUGroups(t, p, demo)
	// Booted (acpid reads the power button): the node shutdown must power the guests off, not
	// stop them by force.
	for _, vm := range []vmState{demo, other} {
		waitFile(t, filepath.Join(s.runRoot, vm.uid, "logs", "serial.log"), testguest.MarkerReady, 3*time.Minute)
	}
	t.Logf("summary: %s", line)

	stopped := time.Now().Truncate(time.Second) // condition times have a resolution of 1 s
	took := p.interrupt(t)
	t.Logf("graceful node shutdown of 2 VMIs took %s", took)
	s.assertGone(t, demo)
	s.assertGone(t, other)
	s.assertControlPlaneGone(t, 10*time.Second)
	s.assertNodeDirsGone(t)
	if _, err := os.Stat(filepath.Join(s.stateDir, "controlplane.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("control plane record left after a clean stop: %v", err)
	}

	p = s.start(t)
	p.waitOutput(t, runningMsg, 4*time.Minute)
	if out := p.out.String(); !strings.Contains(out, "deleted it and created it again") || !strings.Contains(out, "NodeShutdown") {
		t.Errorf("second start did not say it re-created the final demo VMI:\n%s", out)
	}
	c = s.client(t)
	again := s.running(t, c, "demo")
	if again.uid == demo.uid {
		t.Errorf("demo VMI has the old uid %s: not created again", demo.uid)
	}
	v := &vmletv1.VirtualMachineInstance{}
	if err := c.Get(ctx, other.key, v); err != nil {
		t.Fatal(err)
	}
	if string(v.UID) != other.uid || v.Status.Phase != vmletv1.Failed || v.Status.Reason != "NodeShutdown" {
		t.Errorf("extra after the node shutdown: uid %s phase %s reason %q; want %s Failed NodeShutdown", v.UID, v.Status.Phase, v.Status.Reason, other.uid)
	}
	for _, cond := range v.Status.Conditions {
		if cond.Type == vmletv1.VirtualMachineInstanceReady {
			t.Logf("extra after the node shutdown: Ready=%s %s: %s", cond.Status, cond.Reason, cond.Message)
		}
		if cond.Type == vmletv1.VirtualMachineInstanceReady && (cond.Status != "False" || cond.Reason != "NodeShutdown" ||
			!strings.Contains(cond.Message, "the guest powered off") || !strings.Contains(cond.Message, "create it again")) {
			t.Errorf("extra Ready condition %+v, want False NodeShutdown saying the guest powered off and to create it again", cond)
		}
	}
	var evs eventsv1.EventList
	if err := c.List(ctx, &evs, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, e := range evs.Items {
		if e.Reason == "NodeShutdown" && e.Type == "Warning" {
			found[string(e.Regarding.UID)] = true
		}
	}
	if !found[demo.uid] || !found[other.uid] {
		t.Errorf("Warning NodeShutdown events for demo %v, extra %v; want both", found[demo.uid], found[other.uid])
	}
	// Ready went False at the shutdown (NodeShutdown) and True again at this start.
	assertReadyAgainSince(t, c, stopped)
	p.interrupt(t)
	s.assertGone(t, again)
}

// TestLocalKeepVMs: with --keep-vms Ctrl-C stops vmlet and the control plane and leaves the VM
// running; the next start adopts it: same VMI, same launcher and QEMU, one launcher, still
// Running; its Ctrl-C (without --keep-vms) then leaves nothing. Before the stop, `vmctl pause
// demo` (by name, through the API server: spec.paused) pauses the guest (the Paused condition,
// and QEMU's own query-status) and `vmctl unpause demo` resumes it.
func TestLocalKeepVMs(t *testing.T) {
	s := newLocalSetup(t)
	p := s.start(t, "--keep-vms")
	p.waitOutput(t, runningMsg, 4*time.Minute)
	c := s.client(t)
	vm := s.running(t, c, "demo")
	vmctlPause(t, s, c, vm, "pause", true)
	vmctlPause(t, s, c, vm, "unpause", false)
	stopped := time.Now().Truncate(time.Second)
	p.interrupt(t)
	if !poll.Alive(vm.launcherPid) || !poll.Alive(vm.qemuPid) {
		t.Fatalf("--keep-vms: launcher alive %v, QEMU alive %v after Ctrl-C", poll.Alive(vm.launcherPid), poll.Alive(vm.qemuPid))
	}
	s.assertControlPlaneGone(t, 10*time.Second)

	p = s.start(t)
	p.waitOutput(t, "exists and has not ended; adopting it", 2*time.Minute)
	p.waitOutput(t, runningMsg, 2*time.Minute)
	c = s.client(t)
	s.assertAdopted(t, c, vm)
	// Ready went False (VmletStopped) when vmlet left and True again at this start.
	assertReadyAgainSince(t, c, stopped)
	p.interrupt(t)
	s.assertGone(t, vm)
}

// vmctlPause runs `vmctl pause|unpause NAME` (through the API server) and waits for the
// agent's Paused condition, then asks QEMU itself (vmctl --launcher qmp query-status).
func vmctlPause(t *testing.T, s *localSetup, c client.Client, vm vmState, verb string, paused bool) {
	t.Helper()
	out, err := exec.Command(buildVmctl(t, s), verb, vm.key.Name, "-n", vm.key.Namespace, "--kubeconfig", filepath.Join(s.stateDir, "kubeconfig")).CombinedOutput()
	want := fmt.Sprintf("vmi/%s %sd (spec.paused=%v)\n", vm.key.Name, verb, paused)
	if err != nil || string(out) != want {
		t.Fatalf("vmctl %s: %v %q, want %q", verb, err, out, want)
	}
	waitFor(t, c, vm.key, time.Minute, "Paused condition "+fmt.Sprint(paused), func(v *vmletv1.VirtualMachineInstance) bool {
		return isTrue(v, vmletv1.VirtualMachineInstancePaused) == paused
	})
	assertQMPStatus(t, s, vm, map[bool]string{true: "paused", false: "running"}[paused])
}

// assertQMPStatus asks the VM's QEMU for its run state over the launcher socket.
func assertQMPStatus(t *testing.T, s *localSetup, vm vmState, want string) {
	t.Helper()
	sock := filepath.Join(s.runRoot, vm.uid, process.ReadySocket)
	out, err := exec.Command(buildVmctl(t, s), "--launcher", sock, "qmp", "query-status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"status": "`+want+`"`) {
		t.Errorf("vmctl --launcher qmp query-status: %v\n%s\nwant status %s", err, out, want)
	}
}

// TestLocalKill9: a second `vmlet local` on the same state folder fails at once and disturbs
// nothing; SIGKILL of `vmlet local` while its VM runs takes etcd and kube-apiserver along
// (parent-death signal) but not the VM; the next start comes up within a deadline and adopts
// the same QEMU (one launcher), and deleting the VMI leaves nothing.
func TestLocalKill9(t *testing.T) {
	s := newLocalSetup(t)
	ctx := context.Background()
	p := s.start(t)
	p.waitOutput(t, runningMsg, 4*time.Minute)
	c := s.client(t)
	vm := s.running(t, c, "demo")
	if n := len(s.records(t)); n != 2 {
		t.Fatalf("control plane record has %d processes, want etcd and kube-apiserver", n)
	}

	second := s.start(t)
	start := time.Now()
	err := second.wait(t, 30*time.Second)
	if err == nil || !strings.Contains(second.out.String(), fmt.Sprintf("in use by another vmlet local (pid %d)", p.cmd.Process.Pid)) {
		t.Errorf("second vmlet local on the same state folder: exit %v after %s, output:\n%s", err, time.Since(start), second.out.String())
	}
	t.Logf("second vmlet local failed after %s: %s", time.Since(start), strings.TrimSpace(second.out.String()))
	if v := s.running(t, c, "demo"); v.qemuPid != vm.qemuPid {
		t.Fatalf("the second vmlet local disturbed the VM: QEMU %d, was %d", v.qemuPid, vm.qemuPid)
	}

	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = p.wait(t, 30*time.Second)
	s.assertControlPlaneGone(t, 30*time.Second)
	t.Logf("etcd and kube-apiserver gone %s after SIGKILL of vmlet local", time.Since(killed).Round(time.Millisecond))
	if !poll.Alive(vm.launcherPid) || !poll.Alive(vm.qemuPid) {
		t.Fatalf("SIGKILL of vmlet local took the VM along: launcher alive %v, QEMU alive %v", poll.Alive(vm.launcherPid), poll.Alive(vm.qemuPid))
	}

	p = s.start(t)
	restarted := time.Now()
	p.waitOutput(t, "API server up", 2*time.Minute)
	t.Logf("restart: API server up %s after the new start", time.Since(restarted).Round(time.Millisecond))
	c = s.client(t)
	s.assertAdopted(t, c, vm)
	t.Logf("restart: SIGKILL → restarted vmlet local adopted the VM (pause applied and undone, Running) in %s (%s after the new start)",
		time.Since(killed).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	p.waitOutput(t, runningMsg, time.Minute)

	v := &vmletv1.VirtualMachineInstance{}
	if err := c.Get(ctx, vm.key, v); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	waitDeletedVMI(t, c, vm.key)
	s.assertGone(t, vm)
	p.interrupt(t)
	s.assertControlPlaneGone(t, 10*time.Second)
}

// assertReadyAgainSince checks the Node is Ready and that Ready last changed after stopped: the
// stop marked the node not ready and this start ready again.
func assertReadyAgainSince(t *testing.T, c client.Client, stopped time.Time) {
	t.Helper()
	assertNodeReady(t, c)
	if r := nodeReady(t, c); r != nil && r.LastTransitionTime.Time.Before(stopped) {
		t.Errorf("node Ready last changed at %s, before vmlet stopped (%s): the stop did not mark the node not ready", r.LastTransitionTime, stopped)
	}
}
