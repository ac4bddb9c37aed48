package vmistatus_test

import (
	"strings"
	"testing"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu/launcher"
)

func TestExited(t *testing.T) {
	tests := []struct {
		name   string
		code   int
		signal string
		known  bool
		want   vmistatus.Outcome
	}{
		{"guest powered off", launcher.ExitOK, "", true,
			vmistatus.Outcome{Phase: vmletv1.Succeeded, Reason: "GuestShutdown", Message: "the guest powered off"}},
		{"forced", launcher.ExitForced, "", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "ForcedShutdown", Message: "the guest did not power off within its grace period and was stopped by force"}},
		{"qemu died", launcher.ExitQEMUDied, "", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "QEMUDied", Message: "QEMU ended unexpectedly (crashed or killed)"}},
		{"guest panicked", launcher.ExitGuestPanicked, "", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "GuestPanicked", Message: "the guest kernel panicked (its panic device told QEMU) and the VM was stopped"}},
		{"launcher error", launcher.ExitError, "", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "LauncherFailed", Message: "the launcher exited with status 1"}},
		{"usage", launcher.ExitUsage, "", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "LauncherFailed", Message: "the launcher exited with status 2"}},
		// A signal wins over the code (-1 then) and over a vanished launcher.
		{"killed", -1, "killed", true,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "LauncherKilled", Message: "the launcher was killed by killed"}},
		{"killed, unwatched", -1, "terminated", false,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "LauncherKilled", Message: "the launcher was killed by terminated"}},
		// An unwatched exit's code means nothing, even 0.
		{"gone", 0, "", false,
			vmistatus.Outcome{Phase: vmletv1.Failed, Reason: "LauncherGone", Message: "the launcher exited while no agent watched it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := vmistatus.Exited(tt.code, tt.signal, tt.known); got != tt.want {
				t.Errorf("Exited(%d, %q, %v) = %+v\nwant %+v", tt.code, tt.signal, tt.known, got, tt.want)
			}
		})
	}
}

func TestExitMeaning(t *testing.T) {
	for _, tt := range []struct {
		code int32
		want string
	}{
		{launcher.ExitOK, ""},
		{launcher.ExitError, "the launcher failed"},
		{launcher.ExitUsage, "bad launcher command line"},
		{launcher.ExitForced, "the guest did not power off within its grace period and was stopped by force"},
		{launcher.ExitQEMUDied, "QEMU ended unexpectedly"},
		{launcher.ExitGuestPanicked, "the guest kernel panicked"},
		{137, "killed, e.g. out of memory"},
		{6, ""},
	} {
		if got := vmistatus.ExitMeaning(tt.code); got != tt.want {
			t.Errorf("ExitMeaning(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
}

// TestWithDetail: the launcher's words on QEMU's end join the message cleaned (valid UTF-8,
// line breaks as "; ", no other control characters) and bounded (cut on a character).
func TestWithDetail(t *testing.T) {
	const msg = "QEMU ended unexpectedly"
	long := strings.Repeat("é", 600) // 1200 bytes
	tests := []struct{ detail, want string }{
		{"", msg},
		{" \n ", msg},
		{"qemu crash, signal killed", msg + " (qemu crash, signal killed)"},
		{"qemu crash, status 1, stderr: a\nb\x1b[31m\x00", msg + " (qemu crash, status 1, stderr: a; b[31m)"},
		{"bad \xff byte", msg + " (bad ? byte)"},
		{long, msg + " (" + strings.Repeat("é", 512) + "…)"},
	}
	for _, tt := range tests {
		if got := vmistatus.WithDetail(msg, tt.detail); got != tt.want {
			t.Errorf("WithDetail(%q) = %q, want %q", tt.detail, got, tt.want)
		}
	}
}
