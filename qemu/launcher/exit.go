package launcher

import (
	"github.com/vmlet/vmlet/qemu"
)

// Process exit statuses of vmlet-launcher (Exit.Code). The node agent tells a guest that
// stopped by itself from one that was stopped by force or died.
const (
	// ExitOK: the guest powered off by itself (also after the ACPI button of a Shutdown or a
	// SIGTERM, within the grace period), the domain migrated away, or no domain was ever
	// started.
	ExitOK = 0
	// ExitError: the launcher itself failed (a startup step, the API server).
	ExitError = 1
	// ExitUsage: bad command line (vmlet-launcher's flags).
	ExitUsage = 2
	// ExitForced: the launcher stopped QEMU by force: the grace period ran out and QEMU was
	// told to quit (or killed), or the Kill RPC was called.
	ExitForced = 3
	// ExitQEMUDied: QEMU ended without the launcher asking: it crashed, was killed from
	// outside, exited with an error (a migration target does when the incoming migration
	// fails or is cancelled), or quit on a command the launcher did not send (e.g. "quit"
	// typed on qmp-debug.sock).
	ExitQEMUDied = 4
	// ExitGuestPanicked: the guest kernel panicked and told QEMU through its panic device; QEMU
	// exited at once (libvirt's default on_crash, destroy).
	ExitGuestPanicked = 5
)

// ReasonCrashed is the Exit reason, and the CRASHED domain state's reason, of a QEMU that ended
// on its own (crashed or killed): the launcher reports the state, then exits ExitQEMUDied.
const ReasonCrashed = "crashed"

// ReasonGuestPanicked is the Exit reason, and the CRASHED domain state's reason, of a guest
// that panicked: QEMU's run state guest-panicked while it still runs, then the exit
// (ExitGuestPanicked).
const ReasonGuestPanicked = "guest-panicked"

// Exit is how the launcher ended.
type Exit struct {
	Code int
	// Reason: "guest-shutdown", "migrated", "no-domain", "forced", "killed", "crashed",
	// "guest-panicked", "qemu-quit", "migration-failed" (a target whose incoming migration failed),
	// "startup-failed", "api-failed".
	Reason string
	// Detail is human text (QEMU's exit status, signal, stderr tail).
	Detail string
	// QEMU is the driver's exit classification when a domain ran.
	QEMU *qemu.ExitInfo
}

// stopIntent is why the launcher itself stopped QEMU, if it did.
type stopIntent int

const (
	stopNone     stopIntent = iota
	stopShutdown            // Shutdown RPC or SIGTERM: ACPI, grace, quit, kill
	stopKill                // Kill RPC
	stopMigrated            // FinalizeMigration on the source
)

// classifyExit maps the driver's exit classification and the launcher's intent to an Exit;
// incomingPending says the domain was a migration target whose migration had not completed
// (QEMU then exits by itself when the stream fails). It is pure.
func classifyExit(info qemu.ExitInfo, intent stopIntent, incomingPending bool) Exit {
	ex := Exit{QEMU: &info, Detail: exitDetail(info)}
	switch {
	case intent == stopNone && incomingPending:
		ex.Code, ex.Reason = ExitQEMUDied, "migration-failed"
	case intent == stopMigrated && (info.Reason != qemu.ExitCrash || info.Killed):
		ex.Code, ex.Reason = ExitOK, "migrated"
	case info.Reason == qemu.ExitGuestPanic:
		// Whatever the launcher was doing (a shutdown's grace period included): the guest
		// panicked, and that is how it ended.
		ex.Code, ex.Reason = ExitGuestPanicked, ReasonGuestPanicked
	case info.Reason == qemu.ExitGuestShutdown:
		ex.Code, ex.Reason = ExitOK, "guest-shutdown"
	case intent == stopKill && info.Killed:
		ex.Code, ex.Reason = ExitForced, "killed"
	case intent == stopShutdown && (info.Reason == qemu.ExitHostQuit || info.Killed):
		ex.Code, ex.Reason = ExitForced, "forced"
	case info.Reason == qemu.ExitHostQuit:
		ex.Code, ex.Reason = ExitQEMUDied, "qemu-quit"
	default:
		ex.Code, ex.Reason = ExitQEMUDied, ReasonCrashed
	}
	return ex
}

func exitDetail(info qemu.ExitInfo) string {
	s := "qemu " + string(info.Reason)
	switch {
	case info.Signal != 0:
		s += ", signal " + info.Signal.String()
	default:
		s += ", status " + itoa(info.Code)
	}
	if info.ShutdownReason != "" {
		s += ", shutdown reason " + info.ShutdownReason
	}
	if info.Killed {
		s += ", killed by the launcher"
	}
	if info.Reason == qemu.ExitCrash && info.Stderr != "" {
		s += ", stderr: " + lastLines(info.Stderr, 5)
	}
	return s
}
