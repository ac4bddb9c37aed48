package controllers_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/local"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestVMIUnsupportedFailsWithoutLauncher: a VMI asking for something this build cannot do fails
// with a clear reason, and nothing is started for it.
func TestVMIUnsupportedFailsWithoutLauncher(t *testing.T) {
	prereq.Root(t)
	a := startAgent(t, local.ImageDirs{guestImage: testguest.Assets(t).Dir})
	defer a.stop(t)
	tests := []struct {
		name, reason string
		mutate       func(*vmletv1.VirtualMachineInstance)
	}{
		{"unsupported-volume", "Unsupported", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "scratch", VolumeSource: vmletv1.VolumeSource{
				EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("1Gi")}}}}
			v.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "scratch"}}
		}},
		{"unknown-image", "InvalidSpec", func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.Container.Image = "vmlet.dev/missing:1"
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
			waitCondition(t, key, vmletv1.VirtualMachineInstanceSynchronized, metav1.ConditionFalse, time.Second)
			if _, err := os.Stat(filepath.Join(runRoot, string(vmi.UID))); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a failed-at-translation VMI got a run dir: %v", err)
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

// TestVMIQEMUKilled: QEMU dying under a running VMI turns it Failed with a reason, and the
// launcher's leftovers are cleaned up.
func TestVMIQEMUKilled(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	a := startAgent(t, local.ImageDirs{guestImage: files.Dir})
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
	if failed.Status.Reason == "" {
		t.Errorf("failed without a reason: %s", summary(failed))
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
	files := testguest.Assets(t)
	images := local.ImageDirs{guestImage: files.Dir}
	a := startAgent(t, images)
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
	b := startAgent(t, images)
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
