package prereq

import (
	"os"
	"os/exec"
	"testing"

	"github.com/vmlet/vmlet/qemu/accel"
)

// InCI reports whether the tests run under CI (CI=true), where missing prerequisites fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips the test with reason, or fails it under CI.
func Missing(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing under CI=true (a skip here would hide a broken setup): %s", reason)
	}
	t.Skipf("prerequisite missing: %s", reason)
}

// Root requires uid 0.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root")
	}
}

// QEMU requires qemu-system-x86_64 and qemu-img on PATH and returns the emulator path.
func QEMU(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		Missing(t, "qemu-system-x86_64 not on PATH (make deps installs it)")
		return ""
	}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		Missing(t, "qemu-img not on PATH (make deps installs it)")
	}
	return p
}

// KVM requires a really usable KVM. It always skips (never fails) when KVM is not usable, with a
// message containing "KVM not usable": CI machines here have no usable KVM.
func KVM(t testing.TB) {
	t.Helper()
	if d := accel.Probe(); !d.KVMUsable() {
		t.Skipf("KVM not usable: %s", d.Reason)
	}
}
