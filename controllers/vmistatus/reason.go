package vmistatus

// Reason is a short CamelCase cause, as Kubernetes writes them: the VMI's status.reason, a
// condition's reason or an Event's reason. The strings are API: users and tests match on them.
type Reason string

// Reasons of a VMI's end (status.reason, Ready and Synchronized False).
const (
	// ReasonGuestShutdown: the guest powered off by itself (phase Succeeded).
	ReasonGuestShutdown Reason = "GuestShutdown"
	// ReasonForcedShutdown: the guest ignored ACPI for its grace period and was stopped by force.
	ReasonForcedShutdown Reason = "ForcedShutdown"
	// ReasonStopped: a VMI deleted with terminationGracePeriodSeconds 0 was stopped at once, as
	// asked (a Normal event, no warning).
	ReasonStopped Reason = "Stopped"
	// ReasonSELinuxLabelFailed: the agent could not label the vmi's files for its launcher.
	ReasonSELinuxLabelFailed Reason = "SELinuxLabelFailed"
	// ReasonQEMUDied: QEMU ended while the launcher ran it (crashed or killed).
	ReasonQEMUDied Reason = "QEMUDied"
	// ReasonDomainCrashed: QEMU runs but the guest cannot go on (internal-error). A QEMU that
	// ended is QEMUDied, however the agent learns it.
	ReasonDomainCrashed Reason = "DomainCrashed"
	// ReasonGuestPanicked: the guest kernel panicked and told QEMU through its panic device
	// (spec.domain.devices.panicDevices), and QEMU was stopped, as libvirt's default on_crash
	// (destroy) stops it. KubeVirt ends such a VMI Failed too (domain reason Panicked, Event
	// "Stopped": "The VirtualMachineInstance crashed."). Also the Warning Event's reason.
	ReasonGuestPanicked Reason = "GuestPanicked"
	// ReasonLauncherKilled: a signal killed the launcher.
	ReasonLauncherKilled Reason = "LauncherKilled"
	// ReasonLauncherGone: the launcher exited while no agent watched it.
	ReasonLauncherGone Reason = "LauncherGone"
	// ReasonLauncherFailed: the launcher exited with an error status, or could not be started
	// (then Synchronized=False only, retried).
	ReasonLauncherFailed Reason = "LauncherFailed"
	// ReasonLauncherSocketRefused: the launcher's socket is not its own (a file, a symlink,
	// another process listening): the agent does not talk to it.
	ReasonLauncherSocketRefused Reason = "LauncherSocketRefused"
	// ReasonNodeShutdown: the node shut down gracefully (also the local Node's Ready reason). As
	// in KubeVirt, a VMI whose node went away is Failed: a VMI is one run of a VM, the next run
	// is a new VMI (what restarts is a VirtualMachine, which vmlet does not have yet).
	ReasonNodeShutdown Reason = "NodeShutdown"
	// ReasonMigrationPostCopyFailed: a migration failed after it switched to post-copy; the
	// guest's memory was split between source and target and it cannot run on either.
	ReasonMigrationPostCopyFailed Reason = "MigrationPostCopyFailed"
	// ReasonUnplugPending (a Normal event): a hot-unplugged disk or NIC the guest has not
	// released yet; the agent looks again every 2 s.
	ReasonUnplugPending Reason = "UnplugPending"
	// ReasonNodeUnresponsive: the VMI's node agent stopped beating (KubeVirt's
	// NodeUnresponsiveReason): Ready=False while its launcher pod lives, Failed once it is gone.
	ReasonNodeUnresponsive Reason = "NodeUnresponsive"
	// ReasonStartRefused: QEMU refused the domain at every start attempt (it exited during
	// start, or a QMP command of the start failed): e.g. a machine type or CPU model the node's
	// QEMU does not have.
	ReasonStartRefused Reason = "QEMUStartRefused"
	// ReasonInvalidSpec: the spec does not translate into a domain.
	ReasonInvalidSpec Reason = "InvalidSpec"
	// ReasonUnsupported: the spec asks for something vmlet does not do yet.
	ReasonUnsupported Reason = "Unsupported"
	// ReasonNoPodNetwork: the VMI wants interfaces on an agent that has no pod network.
	ReasonNoPodNetwork Reason = "NoPodNetwork"
	// ReasonLauncherPodFailed: the VMI's launcher pod failed (cluster controller).
	ReasonLauncherPodFailed Reason = "LauncherPodFailed"
	// ReasonLauncherPodDeleted: the VMI's launcher pod was deleted or is being deleted
	// (cluster controller).
	ReasonLauncherPodDeleted Reason = "LauncherPodDeleted"
	// ReasonEvicted: the VMI's node was drained and it could not migrate (evictionStrategy
	// LiveMigrateIfPossible): its guest was shut down (the reason of an evicted pod). Also the
	// reason of its DisruptionTarget condition, which asks the node agent for that shutdown.
	ReasonEvicted Reason = "Evicted"
)

// Reasons of the Ready condition on the way to Running and back.
const (
	ReasonScheduling       Reason = "Scheduling"    // waiting for the launcher pod to be scheduled
	ReasonUnschedulable    Reason = "Unschedulable" // no node fits the VMI (or its pod)
	ReasonScheduled        Reason = "Scheduled"     // on a node, waiting for its agent
	ReasonLauncherStarting Reason = "LauncherStarting"
	ReasonPreparingStorage Reason = "PreparingStorage" // images pulled, disks made before the domain starts
	ReasonStarting         Reason = "Starting"         // the launcher has no running domain yet
	ReasonRunning          Reason = "Running"
	ReasonPaused           Reason = "Paused" // Ready=False; also the pause Event's reason
	ReasonShuttingDown     Reason = "ShuttingDown"
)

// Reasons of the Synchronized condition: Synced when the domain matches the spec; otherwise
// why the agent could not get there (storage and image failures carry package storage's
// reasons: Reason(storage.Reason(err))).
const (
	ReasonSynced           Reason = "Synced"
	ReasonSyncFailed       Reason = "SyncFailed" // also the Warning Event of a failed reconcile
	ReasonSecretReadFailed Reason = "SecretReadFailed"
	// ReasonSecretNotFound: a cloud-init or image pull Secret the VMI names does not exist (yet).
	ReasonSecretNotFound Reason = "SecretNotFound"
	// ReasonInvalidImagePullSecret: an image pull secret is not of type
	// kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg, or does not parse; the agent
	// looks again.
	ReasonInvalidImagePullSecret Reason = "InvalidImagePullSecret"
	// ReasonClaimsUnknown: the launcher pod that mounts the VMI's claims is not in the node
	// agent's cache yet (cluster mode); the agent looks again.
	ReasonClaimsUnknown Reason = "ClaimsUnknown"
	ReasonNetworkFailed Reason = "NetworkFailed"
	// ReasonUnknownNetwork: a multus network this node does not offer.
	ReasonUnknownNetwork Reason = "UnknownNetwork"
	// ReasonInterfaceHotplugFailed: wiring or plugging an interface failed (retried).
	ReasonInterfaceHotplugFailed Reason = "InterfaceHotplugFailed"
	// ReasonInterfaceUnplugFailed: the guest did not release the NIC, or unwiring failed.
	ReasonInterfaceUnplugFailed Reason = "InterfaceUnplugFailed"
	// ReasonImagePullBackOff is the kubelet's reason for a container waiting out the back-off
	// of its image's pull; the try that failed has the failure's own reason (ErrImagePull for
	// most).
	ReasonImagePullBackOff Reason = "ImagePullBackOff"
	// ReasonFailedCreate: the cluster controller could not create the launcher pod.
	ReasonFailedCreate Reason = "FailedCreate"
)

// Reasons of the other conditions.
const (
	ReasonAgentConnected     Reason = "AgentConnected"
	ReasonNotPaused          Reason = "NotPaused"
	ReasonPausedByUser       Reason = "PausedByUser"
	ReasonPausedForMigration Reason = "PausedForMigration"
	ReasonPausedIOError      Reason = "PausedIOError"
)

// Reasons of hotplugged volumes' status (status.volumeStatus[].reason).
const (
	ReasonHotplugUnsupported Reason = "HotplugUnsupported"
	ReasonHotplugFailed      Reason = "HotplugFailed"
	// ReasonHotplugAfterMigration: the volume waits for the VMI's migration to end (QEMU plugs
	// no device during one); the node the guest runs on then attaches it.
	ReasonHotplugAfterMigration Reason = "WaitingForMigration"
	// ReasonAttachmentPodPending: in a cluster, the volume's claim waits for its attachment pod
	// to run on the VMI's node (KubeVirt's hp-volume pod), which holds the claim there.
	ReasonAttachmentPodPending Reason = "AttachmentPodPending"
)

// Reasons of the HotVCPUChange and HotMemoryChange conditions (and their Events).
const (
	// ReasonHotplugInProgress: the change is being applied (True).
	ReasonHotplugInProgress Reason = "InProgress"
	// ReasonCPUUnplugPending: the guest has not released the vCPUs asked to go yet (True).
	ReasonCPUUnplugPending Reason = "CPUUnplugPending"
	// ReasonMemoryPlugPending: the guest's virtio-mem driver has not plugged or unplugged all
	// the memory asked yet (True).
	ReasonMemoryPlugPending Reason = "MemoryPlugPending"
	// ReasonCPUUnplugIncomplete: the guest did not release a vCPU in time (False); the agent
	// keeps watching (the eject is asked once).
	ReasonCPUUnplugIncomplete Reason = "CPUUnplugIncomplete"
	// ReasonMemoryChangeIncomplete: the guest did not plug or unplug all the memory asked in
	// time (False; e.g. unmovable pages in the memory to unplug); the agent keeps asking
	// (every memoryReask).
	ReasonMemoryChangeIncomplete Reason = "MemoryChangeIncomplete"
	// ReasonHotplugRefused: the launcher refused the change (False), the message says why.
	ReasonHotplugRefused Reason = "HotplugRefused"
	// ReasonLauncherResizing: the launcher pod's resize was asked for and the kubelet has not
	// applied it yet (True): nothing more is plugged before it is.
	ReasonLauncherResizing Reason = "LauncherResizing"
	// ReasonResizeRefused: the launcher's resources (its pod's in cluster mode, its cgroup's
	// locally) could not follow the change, so it was not applied (False).
	ReasonResizeRefused Reason = "ResizeRefused"
	// ReasonVCPUsChanged, ReasonMemoryChanged: the Events of an applied change.
	ReasonVCPUsChanged  Reason = "VCPUsChanged"
	ReasonMemoryChanged Reason = "MemoryChanged"
)

// Reasons of Events only.
const (
	ReasonResumed           Reason = "Resumed"
	ReasonVolumeAttached    Reason = "VolumeAttached"
	ReasonVolumeDetached    Reason = "VolumeDetached"
	ReasonInterfaceAttached Reason = "InterfaceAttached"
	ReasonInterfaceDetached Reason = "InterfaceDetached"
	ReasonAddressChanged    Reason = "AddressChanged"
	ReasonPulled            Reason = "Pulled"
	// ReasonHotplugDeferred: interfaces the spec plugs or unplugs while the VMI migrates,
	// which the node the guest runs on after the migration applies (a source changes no NIC).
	ReasonHotplugDeferred Reason = "HotplugDeferred"
	// The cluster controller's, named as the kube-controller-manager's for pods.
	ReasonFailedScheduling Reason = "FailedScheduling"
	ReasonSuccessfulCreate Reason = "SuccessfulCreate"
	ReasonSuccessfulDelete Reason = "SuccessfulDelete"
)
