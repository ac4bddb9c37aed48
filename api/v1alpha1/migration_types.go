package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachineInstanceMigration represents the object tracking a VMI's migration to another
// host in the cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName={vmim,vmims},categories=all
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="VMI",type="string",JSONPath=".spec.vmiName"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type VirtualMachineInstanceMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec says which vmi to migrate. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	Spec VirtualMachineInstanceMigrationSpec `json:"spec"`
	// Status is the observed progress of the migration.
	// +optional
	Status VirtualMachineInstanceMigrationStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceMigrationList is a list of VirtualMachineInstanceMigrations.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstanceMigration `json:"items"`
}

// VirtualMachineInstanceMigrationSpec names the vmi to migrate.
type VirtualMachineInstanceMigrationSpec struct {
	// The name of the VMI to perform the migration on. VMI must exist in the migration objects
	// namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	VMIName string `json:"vmiName"`

	// AddedNodeSelector restricts the nodes the migration's target may run on, in addition to
	// the vmi's own nodeSelector and affinity (KubeVirt's field): a node must carry these
	// labels too. On a key the vmi's nodeSelector also sets, the vmi's value wins: it can only
	// narrow the choice, never bypass the vmi's constraints.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	AddedNodeSelector map[string]string `json:"addedNodeSelector,omitempty"`
}

// VirtualMachineInstanceMigrationPhase is a label for the condition of a
// VirtualMachineInstanceMigration at the current time.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=Pending;Scheduling;Scheduled;PreparingTarget;TargetReady;Running;Succeeded;Failed
type VirtualMachineInstanceMigrationPhase string

// Migration phases.
const (
	// MigrationPhaseUnset: no controller has seen the migration yet.
	MigrationPhaseUnset VirtualMachineInstanceMigrationPhase = ""
	// MigrationPending: the migration is accepted by the system.
	MigrationPending VirtualMachineInstanceMigrationPhase = "Pending"
	// MigrationScheduling: the migration's target launcher is being scheduled.
	MigrationScheduling VirtualMachineInstanceMigrationPhase = "Scheduling"
	// MigrationScheduled: the migration's target launcher is running.
	MigrationScheduled VirtualMachineInstanceMigrationPhase = "Scheduled"
	// MigrationPreparingTarget: the target QEMU is being started with -incoming defer.
	MigrationPreparingTarget VirtualMachineInstanceMigrationPhase = "PreparingTarget"
	// MigrationTargetReady: the target listens for the migration stream.
	MigrationTargetReady VirtualMachineInstanceMigrationPhase = "TargetReady"
	// MigrationRunning: the migration is in progress.
	MigrationRunning VirtualMachineInstanceMigrationPhase = "Running"
	// MigrationSucceeded: the guest runs on the target.
	MigrationSucceeded VirtualMachineInstanceMigrationPhase = "Succeeded"
	// MigrationFailed: the migration failed; the guest still runs on the source if it can.
	MigrationFailed VirtualMachineInstanceMigrationPhase = "Failed"
)

// VirtualMachineInstanceMigrationStatus represents information pertaining to a VMI's migration.
type VirtualMachineInstanceMigrationStatus struct {
	// Phase of the migration.
	// +optional
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// Conditions of the migration (metav1.Condition, like the vmi's).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// PhaseTransitionTimestamp is the timestamp of when the last phase change occurred.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	PhaseTransitionTimestamps []VirtualMachineInstanceMigrationPhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// Represents the status of a live migration.
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
}

// VirtualMachineInstanceMigrationPhaseTransitionTimestamp gives a timestamp in relation to when
// a phase is set on a migration.
type VirtualMachineInstanceMigrationPhaseTransitionTimestamp struct {
	// Phase is the phase the migration entered.
	// +optional
	Phase VirtualMachineInstanceMigrationPhase `json:"phase,omitempty"`
	// PhaseTransitionTimestamp is the timestamp of when the phase change occurred.
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// MigrationMode says how the migration currently copies memory.
type MigrationMode string

// Migration modes.
const (
	// MigrationPreCopy: memory is copied while the guest runs on the source.
	MigrationPreCopy MigrationMode = "PreCopy"
	// MigrationPostCopy: the guest runs on the target and faults pages in from the source.
	MigrationPostCopy MigrationMode = "PostCopy"
	// MigrationPaused: the guest is paused while being migrated.
	MigrationPaused MigrationMode = "Paused"
)

// VirtualMachineInstanceMigrationState is the state of a live migration, shown on the vmi and
// on the migration.
type VirtualMachineInstanceMigrationState struct {
	// The time the migration action began.
	// +optional
	// +nullable
	StartTimestamp *metav1.Time `json:"startTimestamp,omitempty"`
	// The time the migration action ended.
	// +optional
	// +nullable
	EndTimestamp *metav1.Time `json:"endTimestamp,omitempty"`
	// The timestamp at which the target node detects the domain is active.
	// +optional
	TargetNodeDomainReadyTimestamp *metav1.Time `json:"targetNodeDomainReadyTimestamp,omitempty"`
	// The Target Node has seen the Domain Start Event.
	// +optional
	TargetNodeDomainDetected bool `json:"targetNodeDomainDetected,omitempty"`
	// The address of the target node to use for the migration.
	// +optional
	TargetNodeAddress string `json:"targetNodeAddress,omitempty"`
	// The target node that the VMI is moving to.
	// +optional
	TargetNode string `json:"targetNode,omitempty"`
	// The target pod that the VMI is moving to.
	// +optional
	TargetPod string `json:"targetPod,omitempty"`
	// The source node that the VMI originated on.
	// +optional
	SourceNode string `json:"sourceNode,omitempty"`
	// The source pod that the VMI originated on.
	// +optional
	SourcePod string `json:"sourcePod,omitempty"`
	// Indicates the migration completed.
	// +optional
	Completed bool `json:"completed,omitempty"`
	// Indicates that the migration failed.
	// +optional
	Failed bool `json:"failed,omitempty"`
	// Indicates that the migration has been requested to abort.
	// +optional
	AbortRequested bool `json:"abortRequested,omitempty"`
	// Contains the reason why the migration failed.
	// +optional
	FailureReason string `json:"failureReason,omitempty"`
	// The VirtualMachineInstanceMigration object associated with this migration.
	// +optional
	MigrationUID types.UID `json:"migrationUid,omitempty"`
	// Lets us know if the vmi is currently running pre or post copy migration.
	// +optional
	Mode MigrationMode `json:"mode,omitempty"`
	// The list of ports opened for live migration on the destination node: node port →
	// what it relays to ("0": the memory migration stream, "49153": the disk copy).
	// +optional
	TargetDirectMigrationNodePorts map[string]int `json:"targetDirectMigrationNodePorts,omitempty"`
	// Indicates the final status of the live migration abortion.
	// +optional
	AbortStatus MigrationAbortStatus `json:"abortStatus,omitempty"`
	// Name of the migration policy (migrations.vmlet.dev MigrationPolicy) whose fields
	// override the cluster's configuration for this migration. If empty, no policy is matched.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	MigrationPolicyName *string `json:"migrationPolicyName,omitempty"`
	// Migration configurations to apply (resolved when the migration was scheduled: the
	// cluster's configuration with the matched policy's fields over it).
	// +optional
	MigrationConfiguration *MigrationConfiguration `json:"migrationConfiguration,omitempty"`
	// SourceDomain is vmlet-specific: the device layout the source runs (machine type, CPU
	// model, the PCIe port of every disk and NIC, hotplugged ones included), which the target
	// reproduces.
	// +optional
	SourceDomain *MigrationDomainLayout `json:"sourceDomain,omitempty"`
	// Progress is vmlet-specific: the live progress of the migration (KubeVirt exposes it only
	// as metrics), refreshed at most every second while it runs; the downtime once it completed.
	// +optional
	Progress *MigrationProgress `json:"progress,omitempty"`
}

// MigrationAbortStatus is the outcome of an abort request.
// +kubebuilder:validation:Enum=Succeeded;Failed;Aborting
type MigrationAbortStatus string

// Abort outcomes.
const (
	// MigrationAbortSucceeded: the migration was cancelled; the guest runs on the source.
	MigrationAbortSucceeded MigrationAbortStatus = "Succeeded"
	// MigrationAbortFailed: the migration had completed before it could be cancelled.
	MigrationAbortFailed MigrationAbortStatus = "Failed"
	// MigrationAbortInProgress: the cancellation is under way.
	MigrationAbortInProgress MigrationAbortStatus = "Aborting"
)

// MigrationDomainLayout is vmlet-specific: how the source domain's devices are placed.
type MigrationDomainLayout struct {
	// Machine is the versioned machine type the source runs, e.g. pc-q35-7.2.
	// +kubebuilder:validation:MaxLength=64
	Machine string `json:"machine"`
	// CPUModel is the QEMU CPU model the source runs.
	// +kubebuilder:validation:MaxLength=64
	CPUModel string `json:"cpuModel"`
	// HotplugPorts is the number of free PCIe root ports the source has.
	HotplugPorts int32 `json:"hotplugPorts"`
	// SCSI says the source has a virtio-scsi controller.
	// +optional
	SCSI bool `json:"scsi,omitempty"`
	// PluggedSockets are the vCPU sockets the source plugged beyond its boot sockets: the
	// target starts with them (CPU hotplug).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=512
	PluggedSockets int32 `json:"pluggedSockets,omitempty"`
	// MemoryRequestedMiB is the source's virtio-mem requested size: the target's device starts
	// with it (memory hotplug).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MemoryRequestedMiB int32 `json:"memoryRequestedMiB,omitempty"`
	// Devices are the source's disks and NICs with their ports.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Devices []MigrationDevicePort `json:"devices,omitempty"`
	// Display says whether the source has a display (VGA + VNC): the target has one exactly
	// then. Unset: a source agent from before displays existed, whose domains have none.
	// +optional
	Display *bool `json:"display,omitempty"`
}

// MigrationDevicePort is where one of the source's devices sits.
type MigrationDevicePort struct {
	// Kind is disk or nic.
	// +kubebuilder:validation:Enum=disk;nic
	Kind string `json:"kind"`
	// ID is the device's QEMU id.
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// Port is its PCIe root port (or SCSI/SATA unit) number.
	Port int32 `json:"port"`
	// Hotplugged says the device was plugged after the source started.
	// +optional
	Hotplugged bool `json:"hotplugged,omitempty"`
}

// MigrationProgress is vmlet-specific: what QEMU reports of a running migration.
type MigrationProgress struct {
	// DataProcessedBytes is the guest memory sent so far.
	// +optional
	DataProcessedBytes int64 `json:"dataProcessedBytes,omitempty"`
	// DataRemainingBytes is the guest memory left to send in this pass.
	// +optional
	DataRemainingBytes int64 `json:"dataRemainingBytes,omitempty"`
	// DataTotalBytes is the guest memory size.
	// +optional
	DataTotalBytes int64 `json:"dataTotalBytes,omitempty"`
	// DirtyRatePagesPerSecond is how fast the guest dirties memory.
	// +optional
	DirtyRatePagesPerSecond int64 `json:"dirtyRatePagesPerSecond,omitempty"`
	// Iteration is the number of passes over guest memory.
	// +optional
	Iteration int64 `json:"iteration,omitempty"`
	// DowntimeMilliseconds is how long the guest was paused at switchover (once completed).
	// +optional
	DowntimeMilliseconds int64 `json:"downtimeMilliseconds,omitempty"`
	// TotalTimeMilliseconds is the migration's duration as QEMU measured it (once completed).
	// +optional
	TotalTimeMilliseconds int64 `json:"totalTimeMilliseconds,omitempty"`
	// UpdateTimestamp is when these figures were read.
	// +optional
	UpdateTimestamp *metav1.Time `json:"updateTimestamp,omitempty"`
}
