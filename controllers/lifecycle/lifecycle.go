package lifecycle

// Launcher is what the node's runtime says of a VMI's launcher.
type Launcher int

const (
	// LauncherAbsent means none was started on this node (or it was removed).
	LauncherAbsent Launcher = iota
	// LauncherStarted means it runs and answers: it may hold a domain.
	LauncherStarted
	// LauncherExited means it ran and exited; its exit says how the guest ended.
	LauncherExited
	// LauncherUnknown means the runtime could not tell; taken as started, so that nothing is
	// failed on a guess (EnsureLauncher finds out).
	LauncherUnknown
	// LauncherStarting means it was started (its process, or in cluster mode its pod, exists)
	// but does not answer yet, so it holds no domain: Secrets and storage still decide. A
	// launcher pod runs only once the node made the VMI's storage (its volume folder), so a
	// missing pull Secret or a failing pull must be said here, not hidden behind "starting".
	LauncherStarting
)

// HoldsDomain reports whether the launcher may hold a domain: it answers, or the runtime
// cannot tell (then nothing is failed or stopped on a guess).
func (l Launcher) HoldsDomain() bool { return l == LauncherStarted || l == LauncherUnknown }

// Storage is where the storage of the VMI's boot-time volumes stands (images pulled, overlays,
// empty disks and the cloud-init ISO made).
type Storage int

const (
	// StorageReady means it is made: the domain can start with it.
	StorageReady Storage = iota
	// StoragePreparing means its operation runs; its end wakes the VMI.
	StoragePreparing
	// StorageBackOff means an image pull failed in a way that may go away; the next try waits.
	StorageBackOff
	// StorageFailed means it cannot be made (volume not found, invalid image name, ...).
	StorageFailed
)

// Facts is what a pass observed before it looks at the domain.
type Facts struct {
	Launcher Launcher
	// SecretsUnreadable means a Secret the VMI refers to could not be read.
	SecretsUnreadable bool
	// Untranslatable means the spec does not translate into a domain on this node.
	Untranslatable bool
	// NetworksMissing means a multus network of the VMI is not offered by the node (looked at
	// only while the launcher holds no domain).
	NetworksMissing bool
	Storage         Storage
}

// Step is what a pass does next.
type Step int

const (
	// EndFromExit ends the VMI from its launcher's exit (Succeeded or Failed with a reason).
	EndFromExit Step = iota
	// WaitForSecrets reports the unreadable Secret and looks again later.
	WaitForSecrets
	// ReportUntranslatable keeps the running domain, reports why the spec no longer
	// translates, and retries.
	ReportUntranslatable
	// FailUntranslatable fails the VMI: nothing runs and the spec cannot.
	FailUntranslatable
	// WaitForNetworks keeps the VMI Scheduled until the node offers its networks.
	WaitForNetworks
	// WaitForStorage keeps the VMI Scheduled until its storage operation ends.
	WaitForStorage
	// BackOffStorage keeps the VMI Scheduled until the image pull's next try.
	BackOffStorage
	// FailStorage fails the VMI with storage's reason.
	FailStorage
	// EnsureLauncher starts the launcher (or finds it ready) and goes on with the domain.
	EnsureLauncher
)

var stepNames = [...]string{"EndFromExit", "WaitForSecrets", "ReportUntranslatable", "FailUntranslatable",
	"WaitForNetworks", "WaitForStorage", "BackOffStorage", "FailStorage", "EnsureLauncher"}

func (s Step) String() string { return stepNames[s] }

// Next decides a pass's step before the domain is looked at.
func Next(f Facts) Step {
	started := f.Launcher.HoldsDomain()
	switch {
	case f.Launcher == LauncherExited:
		return EndFromExit
	case f.SecretsUnreadable:
		return WaitForSecrets
	case f.Untranslatable && started:
		return ReportUntranslatable
	case f.Untranslatable:
		return FailUntranslatable
	case started:
		return EnsureLauncher // storage matters again once the domain is known
	case f.NetworksMissing:
		return WaitForNetworks
	}
	switch f.Storage {
	case StoragePreparing:
		return WaitForStorage
	case StorageBackOff:
		return BackOffStorage
	case StorageFailed:
		return FailStorage
	}
	return EnsureLauncher
}

// DomainStep is what a pass does once the launcher answered.
type DomainStep int

const (
	// Run wires the network, syncs the domain, pauses or resumes it, observes it and
	// hot-plugs what the spec asks.
	Run DomainStep = iota
	// WaitForStorageToStart means no domain yet, and its storage is being prepared.
	WaitForStorageToStart
	// ObserveWhileStoragePrepares means the domain runs (the agent restarted, or the storage plan
	// changed) while its storage is prepared again: observe it, change nothing.
	ObserveWhileStoragePrepares
	// BackOffBeforeStart means no domain yet, an image pull backs off.
	BackOffBeforeStart
	// FailBeforeStart means no domain yet, and its storage cannot be made: fail the VMI.
	FailBeforeStart
	// ObserveBackingOff means the domain runs with the disks it opened; an image pull backs off.
	ObserveBackingOff
	// ReportStorage means the domain runs with the disks it opened; report why storage no longer
	// applies, and retry.
	ReportStorage
)

var domainStepNames = [...]string{"Run", "WaitForStorageToStart", "ObserveWhileStoragePrepares",
	"BackOffBeforeStart", "FailBeforeStart", "ObserveBackingOff", "ReportStorage"}

func (s DomainStep) String() string { return domainStepNames[s] }

// NextForDomain decides a pass's step once the launcher answered: storage as observed, and
// whether the launcher has a domain (defined: starting, running, paused, shutting down, ...).
func NextForDomain(s Storage, defined bool) DomainStep {
	switch {
	case s == StorageReady:
		return Run
	case s == StoragePreparing && defined:
		return ObserveWhileStoragePrepares
	case s == StoragePreparing:
		return WaitForStorageToStart
	case s == StorageBackOff && defined:
		return ObserveBackingOff
	case s == StorageBackOff:
		return BackOffBeforeStart
	case defined:
		return ReportStorage
	}
	return FailBeforeStart
}
