package vmistatus_test

import (
	"testing"

	"github.com/vmlet/vmlet/controllers/vmistatus"
)

// TestReasonStrings pins the reasons' strings: they are API (status.reason, conditions,
// Events), matched by users, tests and KubeVirt tooling, so a rename must be deliberate.
func TestReasonStrings(t *testing.T) {
	for _, tt := range []struct {
		got  vmistatus.Reason
		want string
	}{
		{vmistatus.ReasonGuestShutdown, "GuestShutdown"},
		{vmistatus.ReasonForcedShutdown, "ForcedShutdown"},
		{vmistatus.ReasonStopped, "Stopped"},
		{vmistatus.ReasonQEMUDied, "QEMUDied"},
		{vmistatus.ReasonDomainCrashed, "DomainCrashed"},
		{vmistatus.ReasonGuestPanicked, "GuestPanicked"},
		{vmistatus.ReasonLauncherKilled, "LauncherKilled"},
		{vmistatus.ReasonLauncherGone, "LauncherGone"},
		{vmistatus.ReasonLauncherFailed, "LauncherFailed"},
		{vmistatus.ReasonNodeShutdown, "NodeShutdown"},
		{vmistatus.ReasonNodeUnresponsive, "NodeUnresponsive"},
		{vmistatus.ReasonInvalidSpec, "InvalidSpec"},
		{vmistatus.ReasonUnsupported, "Unsupported"},
		{vmistatus.ReasonNoPodNetwork, "NoPodNetwork"},
		{vmistatus.ReasonLauncherPodFailed, "LauncherPodFailed"},
		{vmistatus.ReasonLauncherPodDeleted, "LauncherPodDeleted"},

		{vmistatus.ReasonScheduling, "Scheduling"},
		{vmistatus.ReasonUnschedulable, "Unschedulable"},
		{vmistatus.ReasonScheduled, "Scheduled"},
		{vmistatus.ReasonLauncherStarting, "LauncherStarting"},
		{vmistatus.ReasonStarting, "Starting"},
		{vmistatus.ReasonRunning, "Running"},
		{vmistatus.ReasonPaused, "Paused"},
		{vmistatus.ReasonShuttingDown, "ShuttingDown"},

		{vmistatus.ReasonSynced, "Synced"},
		{vmistatus.ReasonSyncFailed, "SyncFailed"},
		{vmistatus.ReasonSecretReadFailed, "SecretReadFailed"},
		{vmistatus.ReasonSecretNotFound, "SecretNotFound"},
		{vmistatus.ReasonNetworkFailed, "NetworkFailed"},
		{vmistatus.ReasonUnknownNetwork, "UnknownNetwork"},
		{vmistatus.ReasonInterfaceHotplugFailed, "InterfaceHotplugFailed"},
		{vmistatus.ReasonInterfaceUnplugFailed, "InterfaceUnplugFailed"},
		{vmistatus.ReasonImagePullBackOff, "ImagePullBackOff"},
		{vmistatus.ReasonFailedCreate, "FailedCreate"},

		{vmistatus.ReasonAgentConnected, "AgentConnected"},
		{vmistatus.ReasonNotPaused, "NotPaused"},
		{vmistatus.ReasonPausedByUser, "PausedByUser"},
		{vmistatus.ReasonPausedForMigration, "PausedForMigration"},
		{vmistatus.ReasonPausedIOError, "PausedIOError"},

		{vmistatus.ReasonHotplugUnsupported, "HotplugUnsupported"},
		{vmistatus.ReasonHotplugFailed, "HotplugFailed"},

		{vmistatus.ReasonResumed, "Resumed"},
		{vmistatus.ReasonVolumeAttached, "VolumeAttached"},
		{vmistatus.ReasonVolumeDetached, "VolumeDetached"},
		{vmistatus.ReasonInterfaceAttached, "InterfaceAttached"},
		{vmistatus.ReasonInterfaceDetached, "InterfaceDetached"},
		{vmistatus.ReasonAddressChanged, "AddressChanged"},
		{vmistatus.ReasonPulled, "Pulled"},
		{vmistatus.ReasonFailedScheduling, "FailedScheduling"},
		{vmistatus.ReasonSuccessfulCreate, "SuccessfulCreate"},
		{vmistatus.ReasonSuccessfulDelete, "SuccessfulDelete"},
	} {
		if string(tt.got) != tt.want {
			t.Errorf("reason %q, want %q", tt.got, tt.want)
		}
	}
}
