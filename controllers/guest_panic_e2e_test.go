package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// sysrqPanic is the guest command that panics its kernel a second after it returns (so that
// the guest agent's answer comes back first).
const sysrqPanic = "(sleep 1; echo c >/proc/sysrq-trigger) >/dev/null 2>&1 </dev/null &"

const sysrqPanicLine = "Kernel panic - not syncing: sysrq triggered crash"

// TestVMIGuestPanicWithoutPanicDevice documents what a guest kernel panic does to a VMI that
// has no panic device (spec.domain.devices.panicDevices): nothing tells the host, as under
// KubeVirt. The test guest's panic=-1 reboots it at once (a RESET): QEMU, the launcher and the
// VMI run on (Running and Ready, same QEMU) and the guest boots again; the panic is only in
// the serial log. With a panic device the VMI ends Failed/GuestPanicked instead
// (TestVMIGuestPanicPCI here, cmd/vmlet's fault matrix row guest-panic for the isa model).
func TestVMIGuestPanicWithoutPanicDevice(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	vmi := newVMI("panic-no-device")
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 3*time.Minute)
	qemuPid := running.Status.Launcher.PID
	serial := consoleLog(running)
	guestRun(t, launcherClient(t, a, running), sysrqPanic)
	eventually(t, 2*time.Minute, "the panic, then the guest booted again, in the serial log", func() (bool, string) {
		b, _ := os.ReadFile(serial)
		s := string(b)
		i := strings.Index(s, sysrqPanicLine)
		return i >= 0 && strings.Contains(s[i:], testguest.MarkerReady), fmt.Sprintf("panic seen: %v", i >= 0)
	})
	v := waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	if v.Status.Phase != vmletv1.Running || v.Status.Launcher == nil || v.Status.Launcher.PID != qemuPid ||
		!meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) {
		t.Errorf("after the panic and reboot: %s, launcher %+v; want Running and Ready with QEMU %d", summary(v), v.Status.Launcher, qemuPid)
	}
	deleteAndAudit(t, v, int(qemuPid))
}

// TestVMIGuestPanicPCI: KubeVirt's pvpanic model (QEMU's pvpanic-pci, driven by the guest's
// pvpanic-pci module) ends the VM at the guest's panic: Failed, reason GuestPanicked, QEMU
// gone, nothing left after deletion.
func TestVMIGuestPanicPCI(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	defer a.stop(t)
	vmi := newVMI("panic-pci")
	pvpanic := vmletv1.PanicDevicePvpanic
	vmi.Spec.Domain.Devices.PanicDevices = []vmletv1.PanicDevice{{Model: &pvpanic}}
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 3*time.Minute)
	qemuPid := int(running.Status.Launcher.PID)
	c := launcherClient(t, a, running)
	if out := guestRun(t, c, "ls /sys/bus/pci/drivers/pvpanic-pci/"); !strings.Contains(out, "0000:") {
		t.Fatalf("the guest's pvpanic-pci drives no PCI device: %q", out)
	}
	guestRun(t, c, sysrqPanic)
	failed := waitPhase(t, key, vmletv1.Failed, 2*time.Minute)
	if failed.Status.Reason != "GuestPanicked" {
		// How the launcher classified QEMU's exit (seen once in CI: QEMUDied).
		log, _ := os.ReadFile(filepath.Join(a.runtime.Dir(string(failed.UID)), "launcher.log"))
		if len(log) > 3000 {
			log = log[len(log)-3000:]
		}
		t.Errorf("failed with reason %q, want GuestPanicked: %s; launcher.log ends:\n%s", failed.Status.Reason, summary(failed), log)
	}
	eventually(t, time.Minute, "QEMU gone", func() (bool, string) {
		return !alive(qemuPid), "alive"
	})
	deleteAndAudit(t, failed, qemuPid)
}

// deleteAndAudit deletes v, waits until it is gone and checks that nothing of it is left.
func deleteAndAudit(t *testing.T, v *vmletv1.VirtualMachineInstance, qemuPid int) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(v)
	eventually(t, 2*time.Minute, "VMI deleted", func() (bool, string) {
		_, err := getVMI(t, key)
		return err != nil, "still there"
	})
	assertNothingLeft(t, string(v.UID), qemuPid)
}
