package qemu

import (
	"os"
	"strings"
	"testing"
)

// TestGuestPanicExit: a real guest that panics (sysrq c) with either panic device ends QEMU at
// once (QEMU pauses it, the VM quits QEMU), and the exit is classified ExitGuestPanic with the
// SHUTDOWN reason guest-panic, QEMU's status 0 (its quit) and not killed.
func TestGuestPanicExit(t *testing.T) {
	for _, tt := range []struct {
		model  PanicModel
		driver string // the guest's sysfs folder of the driver that must hold the device
		dev    string // what that folder lists for the device
	}{
		{PanicISA, "/sys/bus/platform/drivers/pvpanic-mmio", "QEMU0001"},
		{PanicPCI, "/sys/bus/pci/drivers/pvpanic-pci", "0000:"},
	} {
		t.Run(string(tt.model), func(t *testing.T) {
			spec := guestSpec(t, guestOpts{mutate: func(s *Spec) { s.Panic = []PanicModel{tt.model} }})
			vm := startGuest(t, spec)
			vm.waitReady(t)
			if out := vm.sh(t, "ls "+tt.driver); !strings.Contains(out, tt.dev) {
				t.Fatalf("%s holds no device: %q", tt.driver, out)
			}
			vm.sh(t, "(sleep 1; echo c >/proc/sysrq-trigger) >/dev/null 2>&1 </dev/null &")
			exit := vm.waitExit(t)
			if exit.Reason != ExitGuestPanic || exit.Code != 0 || exit.ShutdownReason != "guest-panic" || exit.Killed {
				t.Errorf("exit = %+v, want a guest panic with status 0 (the quit)", exit)
			}
			if log, _ := os.ReadFile(spec.Serial.LogFile); !strings.Contains(string(log), "Kernel panic - not syncing: sysrq triggered crash") {
				t.Errorf("serial log lacks the panic: %q", shorten(string(log), 300))
			}
		})
	}
}
