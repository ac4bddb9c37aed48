package lifecycle

import "testing"

func TestNext(t *testing.T) {
	tests := []struct {
		name string
		f    Facts
		want Step
	}{
		{"new VMI, all there", Facts{}, EnsureLauncher},
		{"started, all there", Facts{Launcher: LauncherStarted}, EnsureLauncher},
		{"runtime cannot tell", Facts{Launcher: LauncherUnknown}, EnsureLauncher},
		{"exited ends it whatever else", Facts{Launcher: LauncherExited, SecretsUnreadable: true, Untranslatable: true, NetworksMissing: true, Storage: StorageFailed}, EndFromExit},
		{"secret unreadable before start", Facts{SecretsUnreadable: true, Untranslatable: true}, WaitForSecrets},
		{"secret unreadable while running", Facts{Launcher: LauncherStarted, SecretsUnreadable: true}, WaitForSecrets},
		{"untranslatable before start fails", Facts{Untranslatable: true, NetworksMissing: true}, FailUntranslatable},
		{"untranslatable while running is reported", Facts{Launcher: LauncherStarted, Untranslatable: true}, ReportUntranslatable},
		{"untranslatable, runtime cannot tell: not failed on a guess", Facts{Launcher: LauncherUnknown, Untranslatable: true}, ReportUntranslatable},
		{"networks missing before start", Facts{NetworksMissing: true, Storage: StorageFailed}, WaitForNetworks},
		{"networks missing while running: hotplug's business", Facts{Launcher: LauncherStarted, NetworksMissing: true}, EnsureLauncher},
		{"storage preparing before start", Facts{Storage: StoragePreparing}, WaitForStorage},
		{"pull backing off before start", Facts{Storage: StorageBackOff}, BackOffStorage},
		{"storage failed before start", Facts{Storage: StorageFailed}, FailStorage},
		{"storage failed while running: decided with the domain", Facts{Launcher: LauncherStarted, Storage: StorageFailed}, EnsureLauncher},
		{"storage preparing while running", Facts{Launcher: LauncherStarted, Storage: StoragePreparing}, EnsureLauncher},
		{"starting, all there", Facts{Launcher: LauncherStarting}, EnsureLauncher},
		{"starting (a launcher pod waits for its volume folder): secret missing", Facts{Launcher: LauncherStarting, SecretsUnreadable: true}, WaitForSecrets},
		{"starting: pull backing off", Facts{Launcher: LauncherStarting, Storage: StorageBackOff}, BackOffStorage},
		{"starting: storage preparing", Facts{Launcher: LauncherStarting, Storage: StoragePreparing}, WaitForStorage},
		{"starting: storage failed", Facts{Launcher: LauncherStarting, Storage: StorageFailed}, FailStorage},
		{"starting: untranslatable fails (no domain)", Facts{Launcher: LauncherStarting, Untranslatable: true}, FailUntranslatable},
		{"starting: networks missing", Facts{Launcher: LauncherStarting, NetworksMissing: true}, WaitForNetworks},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Next(tt.f); got != tt.want {
				t.Errorf("Next(%+v) = %s, want %s", tt.f, got, tt.want)
			}
		})
	}
}

func TestNextForDomain(t *testing.T) {
	tests := []struct {
		s       Storage
		defined bool
		want    DomainStep
	}{
		{StorageReady, false, Run},
		{StorageReady, true, Run},
		{StoragePreparing, false, WaitForStorageToStart},
		{StoragePreparing, true, ObserveWhileStoragePrepares},
		{StorageBackOff, false, BackOffBeforeStart},
		{StorageBackOff, true, ObserveBackingOff},
		{StorageFailed, false, FailBeforeStart},
		{StorageFailed, true, ReportStorage},
	}
	for _, tt := range tests {
		if got := NextForDomain(tt.s, tt.defined); got != tt.want {
			t.Errorf("NextForDomain(%d, defined=%v) = %s, want %s", tt.s, tt.defined, got, tt.want)
		}
	}
}
