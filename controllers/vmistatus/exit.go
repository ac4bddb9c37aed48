package vmistatus

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// Outcome is how a VMI ends: its final phase, reason and message.
type Outcome struct {
	Phase   vmletv1.VirtualMachineInstancePhase
	Reason  Reason
	Message string
}

// Exited is what the end of a VMI's launcher means (qemu/launcher's Exit* codes): code 0 is a
// guest that powered off by itself (Succeeded); everything else fails the VMI. signal is the
// signal that killed the launcher ("" for none); known is false when the launcher vanished
// while no agent watched it (its code is unknown).
func Exited(code int, signal string, known bool) Outcome {
	fail := func(r Reason, msg string) Outcome { return Outcome{vmletv1.Failed, r, msg} }
	switch {
	case signal != "":
		return fail(ReasonLauncherKilled, fmt.Sprintf("the launcher was killed by %s", signal))
	case !known:
		return fail(ReasonLauncherGone, "the launcher exited while no agent watched it")
	case code == launcher.ExitOK:
		return Outcome{vmletv1.Succeeded, ReasonGuestShutdown, "the guest powered off"}
	case code == launcher.ExitForced:
		return fail(ReasonForcedShutdown, ExitMeaning(launcher.ExitForced))
	case code == launcher.ExitQEMUDied:
		return fail(ReasonQEMUDied, "QEMU ended unexpectedly (crashed or killed)")
	case code == launcher.ExitGuestPanicked:
		return fail(ReasonGuestPanicked, "the guest kernel panicked (its panic device told QEMU) and the VM was stopped")
	}
	return fail(ReasonLauncherFailed, fmt.Sprintf("the launcher exited with status %d", code))
}

// maxDetail bounds the launcher's words in a message.
const maxDetail = 1024

// WithDetail adds the launcher's word on how QEMU ended (e.g. "qemu crash, signal killed",
// with QEMU's last stderr lines), or the last lines of a failed launcher's log, to an end's
// message: the logs go with the VMI's run folder. The detail comes from the unprivileged launcher: it is made valid UTF-8, line breaks
// become "; ", other control characters go, and it is cut to maxDetail bytes.
func WithDetail(msg, detail string) string {
	detail = strings.ReplaceAll(strings.TrimSpace(strings.ToValidUTF8(detail, "?")), "\n", "; ")
	detail = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, detail)
	if detail == "" {
		return msg
	}
	if len(detail) > maxDetail {
		cut := maxDetail
		for cut > 0 && !utf8.RuneStart(detail[cut]) {
			cut--
		}
		detail = detail[:cut] + "…"
	}
	return msg + " (" + detail + ")"
}

// ExitMeaning explains a vmlet-launcher exit status in a few words ("" when it has no
// particular meaning), for messages that quote the status: a launcher container's exit code
// in the cluster controller's LauncherPodFailed message.
func ExitMeaning(code int32) string {
	switch code {
	case launcher.ExitError:
		return "the launcher failed"
	case launcher.ExitUsage:
		return "bad launcher command line"
	case launcher.ExitForced:
		return "the guest did not power off within its grace period and was stopped by force"
	case launcher.ExitQEMUDied:
		return "QEMU ended unexpectedly"
	case launcher.ExitGuestPanicked:
		return "the guest kernel panicked"
	case 128 + 9: // SIGKILL, as a container runtime reports it
		return "killed, e.g. out of memory"
	}
	return ""
}
