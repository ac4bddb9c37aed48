package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIFailsWithoutLauncher: a VMI asking for something this build cannot do, or whose
// volumes cannot be made (an image name that does not parse, an image without the kernel it
// names, a claim or host path this node does not provide), fails with a clear reason and a
// Warning event, and nothing is started or left for it. (An image that cannot be pulled is
// waited for: TestVMIImagePullBackOff.)
func TestVMIFailsWithoutLauncher(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{HostDiskRoot: nodeDir(t)})
	defer a.stop(t)
	tests := []struct {
		name, reason, message string
		mutate                func(*vmletv1.VirtualMachineInstance)
	}{
		{"unsupported-disk", "Unsupported", "dedicated I/O thread", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "scratch", VolumeSource: vmletv1.VolumeSource{
				EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}}}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "scratch", DedicatedIOThread: ptr.To(true)}}
		}},
		{"invalid-image-name", "InvalidImageName", "vmlet.dev/Not-Lower-Case:1", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.Image = "vmlet.dev/Not-Lower-Case:1"
		}},
		{"no-kernel-in-image", "InvalidKernelBootImage", "/boot/nothing", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = "/boot/nothing"
		}},
		{"unknown-claim", "VolumeNotFound", "nosuchclaim", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "data", VolumeSource: vmletv1.VolumeSource{
				PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "nosuchclaim"}}}}}
		}},
		// KubeVirt's vmi-with-sidecar-hook: its SMBIOS sidecar would rewrite the domain.
		{"hook-sidecar", "Unsupported", "hooks.kubevirt.io/hookSidecars", func(v *vmletv1.VirtualMachineInstance) {
			v.Annotations = map[string]string{
				"hooks.kubevirt.io/hookSidecars":              `[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}]`,
				"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward",
			}
		}},
		{"host-disk-outside-root", "HostPathNotAllowed", "/etc/passwd", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "host", VolumeSource: vmletv1.VolumeSource{
				HostDisk: &vmletv1.HostDisk{Path: "/etc/passwd", Type: vmletv1.HostDiskExists}}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := newVMI(tt.name)
			tt.mutate(vmi)
			if err := env.Client.Create(context.Background(), vmi); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(vmi)
			got := waitPhase(t, key, vmletv1.Failed, time.Minute)
			if got.Status.Reason != tt.reason {
				t.Errorf("reason = %q, want %q (%s)", got.Status.Reason, tt.reason, summary(got))
			}
			c := waitCondition(t, key, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionFalse, time.Second)
			if msg := meta.FindStatusCondition(c.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized).Message; !strings.Contains(msg, tt.message) {
				t.Errorf("condition message %q does not mention %q", msg, tt.message)
			}
			waitEvent(t, got, tt.reason)
			for _, dir := range []string{filepath.Join(runRoot, string(vmi.UID)), filepath.Join(volumeRoot, string(vmi.UID))} {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a VMI that failed before starting left %s: %v", dir, err)
				}
			}
			if err := env.Client.Delete(context.Background(), got); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, "failed VMI deleted", func() (bool, string) {
				_, err := getVMI(t, key)
				return apierrors.IsNotFound(err), "still there"
			})
		})
	}
}

// waitEvent waits for a Warning event with reason about the VMI.
func waitEvent(t *testing.T, vmi *vmletv1.VirtualMachineInstance, reason string) {
	t.Helper()
	waitEventAbout(t, vmi, "Warning", reason)
}

// waitEventAbout waits for an event of type typ with reason regarding obj.
func waitEventAbout(t *testing.T, obj client.Object, typ, reason string) {
	t.Helper()
	waitEventNote(t, 10*time.Second, obj, typ, reason, "", time.Time{})
}

// waitEventNote waits for an event about obj of type typ and reason whose note contains
// substr, recorded at or after since, for at most d.
func waitEventNote(t *testing.T, d time.Duration, obj client.Object, typ, reason, substr string, since time.Time) {
	t.Helper()
	eventually(t, d, typ+" event "+reason+" saying "+substr, func() (bool, string) {
		var l eventsv1.EventList
		if err := env.Client.List(context.Background(), &l, client.InNamespace(obj.GetNamespace())); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range l.Items {
			at, from := e.EventTime.Time, since
			if at.IsZero() { // whole seconds
				at, from = e.CreationTimestamp.Time, since.Truncate(time.Second)
			}
			if e.Regarding.UID != obj.GetUID() || at.Before(from) {
				continue
			}
			if e.Type == typ && e.Reason == reason && strings.Contains(e.Note, substr) {
				return true, ""
			}
			seen = append(seen, e.Type+"/"+e.Reason+": "+e.Note)
		}
		return false, fmt.Sprintf("events since %s: %v", since.Format(time.RFC3339Nano), seen)
	})
}

// TestVMIQEMUKilled: QEMU dying under a running VMI turns it Failed with a reason, and the
// launcher's leftovers are cleaned up.
func TestVMIQEMUKilled(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	vmi := newVMI("qemu-killed")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	qemuPid := int(running.Status.Launcher.PID)
	start := time.Now()
	if err := unix.Kill(qemuPid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := waitPhase(t, key, vmletv1.Failed, 30*time.Second)
	t.Logf("QEMU SIGKILL → VMI Failed (%s) in %s", failed.Status.Reason, time.Since(start).Round(time.Millisecond))
	// The launcher reports the domain crashed, then exits ExitQEMUDied: whichever the agent
	// sees first, the VMI says the same.
	if failed.Status.Reason != "QEMUDied" {
		t.Errorf("failed with reason %q, want QEMUDied: %s", failed.Status.Reason, summary(failed))
	}
	// And how, in the launcher's words (its run folder, with QEMU's log, goes with the VMI).
	if c := meta.FindStatusCondition(failed.Status.Conditions, vmletv1.VirtualMachineInstanceReady); c == nil || !strings.Contains(c.Message, "signal killed") {
		t.Errorf("Ready condition %+v does not say QEMU was killed", c)
	}
	if err := env.Client.Delete(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "failed VMI deleted and cleaned", func() (bool, string) {
		_, err := getVMI(t, key)
		_, serr := os.Stat(filepath.Join(runRoot, string(vmi.UID)))
		return err != nil && errors.Is(serr, os.ErrNotExist), "still there"
	})
	assertNothingLeft(t, string(vmi.UID), qemuPid)
}

// TestAgentRestartAdopts: the agent going away and a new one starting leaves the VM running
// untouched (same QEMU), and the new agent keeps driving it.
func TestAgentRestartAdopts(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	vmi := newVMI("adopt")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		a.stop(t)
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	// The guest agent answering means the guest booted (and its ACPI handler runs).
	before := waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	a.stop(t)

	t0 := time.Now()
	b := startAgent(t, agentOptions{})
	defer b.stop(t)
	setPaused(t, key, true)
	after := waitCondition(t, key, vmletv1.VirtualMachineInstancePaused, metav1.ConditionTrue, 30*time.Second)
	if after.Status.Launcher.PID != before.Status.Launcher.PID {
		t.Fatalf("QEMU pid changed across agent restart: %d -> %d", before.Status.Launcher.PID, after.Status.Launcher.PID)
	}
	entries, err := os.ReadDir(runRoot)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Name() == string(vmi.UID) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d launcher dirs for the VMI, want 1", n)
	}
	t.Logf("new agent drove the adopted VM to Paused after %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if err := env.Client.Delete(context.Background(), after); err != nil {
		t.Fatal(err)
	}
	defer func() { t.Logf("deleted after %s", time.Since(t0).Round(time.Millisecond)) }()
	eventually(t, 90*time.Second, "VMI deleted", func() (bool, string) {
		_, err := getVMI(t, key)
		return err != nil, "still there"
	})
	assertNothingLeft(t, string(vmi.UID), int(before.Status.Launcher.PID))
}

// TestDeleteForcedShutdown: deleting a VMI whose guest ignores the ACPI power button stops it by
// force at the end of its grace period, and says so: a Warning event ForcedShutdown about the
// VMI (which outlives it). Before, the VMI simply went away.
func TestDeleteForcedShutdown(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	vmi := newVMI("forced-stop")
	vmi.Spec.Domain.Firmware.KernelBoot.KernelArgs += " " + testguest.CmdlineNoACPI
	vmi.Spec.TerminationGracePeriodSeconds = ptr.To[int64](2)
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	got := waitPhase(t, key, vmletv1.Running, 2*time.Minute)
	waitSerial(t, consoleLog(got), testguest.MarkerReady)
	if err := env.Client.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	waitEvent(t, got, "ForcedShutdown")
	assertNothingLeft(t, string(got.UID), int(got.Status.Launcher.PID))

	// terminationGracePeriodSeconds: 0 (as several of KubeVirt's examples write) asks for the
	// immediate stop: a Normal event says so, no warning.
	now := newVMI("stop-now")
	now.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	if err := env.Client.Create(context.Background(), now); err != nil {
		t.Fatal(err)
	}
	key = client.ObjectKeyFromObject(now)
	got = waitPhase(t, key, vmletv1.Running, 2*time.Minute)
	if err := env.Client.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	waitNormalEvent(t, got, "Stopped")
	var l eventsv1.EventList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(got.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Items {
		if e.Regarding.UID == got.UID && e.Type == "Warning" {
			t.Errorf("a grace period of 0 gave a Warning event: %s: %s", e.Reason, e.Note)
		}
	}
	assertNothingLeft(t, string(got.UID), int(got.Status.Launcher.PID))
}

// TestVMILauncherKilled: the launcher dying under a running VMI (SIGKILL) takes QEMU with it
// (Pdeathsig: no guest runs with nobody driving it), the VMI turns Failed with reason
// LauncherKilled and a Warning event, and deleting it leaves nothing.
func TestVMILauncherKilled(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	vmi := newVMI("launcher-killed")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	qemuPid := int(running.Status.Launcher.PID)
	st, err := a.runtime.State(string(vmi.UID))
	if err != nil || st.Pid <= 0 {
		t.Fatalf("launcher state: %+v, %v", st, err)
	}
	if err := unix.Kill(st.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var failed *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, "VMI Failed after its launcher was killed", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		failed = v
		// What the agent's runtime and the kernel say, should the agent not notice.
		rst, rerr := a.runtime.State(string(vmi.UID))
		return v.Status.Phase == vmletv1.Failed, fmt.Sprintf("%s; runtime state %+v (%v); launcher %s; QEMU %s",
			summary(v), rst, rerr, procState(st.Pid), procState(qemuPid))
	})
	if failed.Status.Reason != "LauncherKilled" {
		t.Errorf("reason %q, want LauncherKilled: %s", failed.Status.Reason, summary(failed))
	}
	waitEvent(t, failed, "LauncherKilled")
	eventually(t, 30*time.Second, "QEMU gone with its launcher", func() (bool, string) {
		return !alive(qemuPid), fmt.Sprintf("QEMU %d alive", qemuPid)
	})
	if err := env.Client.Delete(context.Background(), failed); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, string(vmi.UID), qemuPid, st.Pid)
}

// procState is the State line of /proc/PID/status ("gone" when there is none).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "gone"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "State:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "State:"))
		}
	}
	return "?"
}
