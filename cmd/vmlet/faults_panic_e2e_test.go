package main_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/poll"
)

// withPanicDevice gives the row's VMI KubeVirt's panic device with its default model (isa on
// x86_64: QEMU's ISA pvpanic, which the test guest's pvpanic-mmio module drives).
func withPanicDevice(_ *testing.T, _ *faultVM, v *vmletv1.VirtualMachineInstance) {
	v.Spec.Domain.Devices.PanicDevices = []vmletv1.PanicDevice{{}}
}

// guestPanic: the guest kernel panics (sysrq c, started through the guest agent). Its panic
// device tells QEMU, which exits at once; the VMI ends Failed with reason GuestPanicked (never
// Succeeded: QEMU's own default action would have exited 0, like a poweroff) and a Warning
// Event of that reason, QEMU is gone, and the serial log shows the panic that caused it.
func guestPanic(t *testing.T, f *faultVM) {
	sock := filepath.Join(f.runDir, "launcher.sock")
	// The guest booted (waitRunning); the launcher's agent poller may not have connected yet.
	waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "AgentConnected", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	// The device is there and the guest's driver holds it (ACPI QEMU0001): the panic below
	// can reach QEMU.
	if out := guestSh(t, sock, "ls /sys/bus/platform/drivers/pvpanic-mmio/"); !strings.Contains(out, "QEMU0001") {
		t.Fatalf("pvpanic-mmio drives no QEMU0001 device in the guest: %q", out)
	}
	// The agent removes the run dir once the launcher is gone: read its logs through files
	// opened now.
	serial, qmpLog := openLog(t, f.runDir, "serial.log"), openLog(t, f.runDir, "qmp.log")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	// In the background, a second later, so that the guest agent's answer comes back first.
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", "(sleep 1; echo c >/proc/sysrq-trigger) >/dev/null 2>&1 </dev/null &"}, nil, 20*time.Second)
	c.Close()
	if err != nil || r.GetExitCode() != 0 {
		t.Fatalf("start the panic in the guest: %v, exit %d: %s", err, r.GetExitCode(), r.GetStderr())
	}
	f.inject()
	v := waitFor(t, f.s.env.Client, f.key, 2*time.Minute, "Failed or Succeeded after the guest panic", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.Phase == vmletv1.Failed || v.Status.Phase == vmletv1.Succeeded
	})
	if v.Status.Phase != vmletv1.Failed || v.Status.Reason != "GuestPanicked" {
		t.Errorf("after the guest panic: phase %s reason %q, want Failed GuestPanicked", v.Status.Phase, v.Status.Reason)
	}
	poll.Until(t, time.Minute, fmt.Sprintf("QEMU %d gone", f.qemuPid), func() (bool, string) {
		return !poll.Alive(f.qemuPid), "alive"
	})
	if b, _ := io.ReadAll(serial); !strings.Contains(string(b), "Kernel panic - not syncing: sysrq triggered crash") {
		t.Errorf("the serial log shows no sysrq panic:\n%s", tailOf(string(b)))
	}
	if b, _ := io.ReadAll(qmpLog); !strings.Contains(string(b), "GUEST_PANICKED") {
		t.Errorf("no GUEST_PANICKED event in the launcher's QMP log:\n%s", tailOf(string(b)))
	}
	poll.Until(t, time.Minute, "a Warning GuestPanicked event", func() (bool, string) {
		var evs eventsv1.EventList
		if err := f.s.env.Client.List(context.Background(), &evs, client.InNamespace(f.key.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if string(e.Regarding.UID) != f.uid {
				continue
			}
			if e.Type == "Warning" && e.Reason == "GuestPanicked" {
				return true, ""
			}
			seen = append(seen, e.Type+"/"+e.Reason)
		}
		return false, fmt.Sprintf("events of the VMI: %v", seen)
	})
}

// openLog opens one of the launcher's logs (runDir/logs/name) for reading; t.Cleanup closes it.
func openLog(t *testing.T, runDir, name string) *os.File {
	t.Helper()
	l, err := os.Open(filepath.Join(runDir, "logs", name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}
