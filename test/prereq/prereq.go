package prereq

import (
	"os"
	"os/exec"
	"testing"

	"github.com/vmlet/vmlet/qemu/accel"
)

// InCI reports whether the tests run under CI (CI=true), where missing prerequisites fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// ShortSkip is in the message of every skip that -short causes.
const ShortSkip = "not run with -short (make unit)"

// Short skips the test under -short (make unit), saying what it needs. Every guard calls it
// first; call it directly for a heavy prerequisite that has no guard of its own.
func Short(t testing.TB, needs string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: %s", needs, ShortSkip)
	}
}

// APIServer marks a test that needs a real kube-apiserver and etcd (test/apienv). It only
// skips under -short: a missing control plane fails in apienv.Start.
func APIServer(t testing.TB) {
	t.Helper()
	Short(t, "the API server")
}

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
	Short(t, "root")
	if os.Geteuid() != 0 {
		Missing(t, "needs root")
	}
}

// QEMU requires qemu-system-x86_64 and qemu-img on PATH and returns the emulator path.
func QEMU(t testing.TB) string {
	t.Helper()
	Short(t, "QEMU")
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
	Short(t, "KVM")
	if d := accel.Probe(); !d.KVMUsable() {
		t.Skipf("KVM not usable: %s", d.Reason)
	}
}
