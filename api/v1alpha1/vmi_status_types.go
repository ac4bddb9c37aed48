package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// VirtualMachineInstancePhase is a label for the condition of a VirtualMachineInstance at the
// current time.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=Pending;Scheduling;Scheduled;Running;Succeeded;Failed;Unknown
type VirtualMachineInstancePhase string

// Phases of a VirtualMachineInstance.
const (
	// VMPhaseUnset: the object was just created and no controller has seen it.
	VMPhaseUnset VirtualMachineInstancePhase = ""
	// Pending means the VirtualMachineInstance has been accepted by the system.
	Pending VirtualMachineInstancePhase = "Pending"
	// Scheduling: a launcher exists but is not yet scheduled and running.
	Scheduling VirtualMachineInstancePhase = "Scheduling"
	// Scheduled: the launcher was scheduled and the node agent has taken over.
	Scheduled VirtualMachineInstancePhase = "Scheduled"
	// Running means QEMU runs the guest (which may be paused, see the Paused condition).
	Running VirtualMachineInstancePhase = "Running"
	// Succeeded means the VirtualMachineInstance stopped voluntarily, e.g. reacted to SIGTERM or
	// shutdown was invoked from inside the VirtualMachineInstance.
	Succeeded VirtualMachineInstancePhase = "Succeeded"
	// Failed means the vmi crashed, disappeared unexpectedly or got deleted from the cluster
	// before it was ever started.
	Failed VirtualMachineInstancePhase = "Failed"
	// Unknown means that for some reason the state of the VirtualMachineInstance could not be
	// obtained, typically due to an error in communicating with its node.
	Unknown VirtualMachineInstancePhase = "Unknown"
)

// Condition types of a VirtualMachineInstance (the same strings as KubeVirt's).
const (
	// VirtualMachineInstanceReady means the guest runs and can serve requests.
	VirtualMachineInstanceReady = "Ready"
	// VirtualMachineInstancePaused is True while the guest's vCPUs are stopped.
	VirtualMachineInstancePaused = "Paused"
	// VirtualMachineInstanceAgentConnected reflects whether the QEMU guest agent is connected.
	VirtualMachineInstanceAgentConnected = "AgentConnected"
	// VirtualMachineInstanceIsMigratable says whether the vmi can be live migrated.
	VirtualMachineInstanceIsMigratable = "LiveMigratable"
	// VirtualMachineInstanceSynchronized is False when the node agent failed to bring the
	// domain to the spec (the reason and message say why).
	VirtualMachineInstanceSynchronized = "Synchronized"
	// VirtualMachineInstanceVCPUChange is True while a change of spec.domain.cpu.sockets is
	// being applied to the running guest (KubeVirt's HotVCPUChange); False with a reason when
	// it cannot be (e.g. the guest did not release a vCPU); absent when there is none.
	VirtualMachineInstanceVCPUChange = "HotVCPUChange"
	// VirtualMachineInstanceMemoryChange is True while a change of spec.domain.memory.guest
	// is being applied (KubeVirt's HotMemoryChange); False with a reason when it cannot be
	// (e.g. the guest did not unplug all the memory asked); absent when there is none.
	VirtualMachineInstanceMemoryChange = "HotMemoryChange"
	// VirtualMachineInstanceDisruptionTarget is True when the vmi is about to be shut down by a
	// drain of its node that it cannot leave by migration (as a pod's DisruptionTarget): its
	// node agent shuts the guest down and ends it Failed with reason Evicted.
	VirtualMachineInstanceDisruptionTarget = "DisruptionTarget"
	// VirtualMachineInstanceEvacuationBlocked is vmlet's: True while the vmi blocks the drain of
	// its node (evictionStrategy LiveMigrate, not migratable); the message says why.
	VirtualMachineInstanceEvacuationBlocked = "EvacuationBlocked"
)

// VirtualMachineInstanceStatus represents information about the status of a
// VirtualMachineInstance. Status may trail the actual state of a system.
type VirtualMachineInstanceStatus struct {
	// NodeName is the name where the VirtualMachineInstance is currently running.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// A brief CamelCase message indicating details about why the VMI is in this state. e.g.
	// 'NodeUnresponsive'
	// +optional
	Reason string `json:"reason,omitempty"`
	// Conditions are specific points in VirtualMachineInstance's runtime: Ready, Paused,
	// AgentConnected, LiveMigratable, Synchronized. metav1.Condition has the same type, status,
	// reason, message and lastTransitionTime fields as KubeVirt's condition, plus
	// observedGeneration, and no lastProbeTime.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Phase is the status of the VirtualMachineInstance in kubernetes world. It is not the
	// VirtualMachineInstance status, but partially correlates to it.
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// PhaseTransitionTimestamp is the timestamp of when the last phase change occurred.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	PhaseTransitionTimestamps []VirtualMachineInstancePhaseTransitionTimestamp `json:"phaseTransitionTimestamps,omitempty"`
	// Interfaces represent the details of available network interfaces.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Interfaces []VirtualMachineInstanceNetworkInterface `json:"interfaces,omitempty"`
	// Guest OS Information, as reported by the guest agent.
	// +optional
	GuestOSInfo VirtualMachineInstanceGuestOSInfo `json:"guestOSInfo,omitempty"`
	// EvacuationNodeName is set when the vmi must leave this node (its node is drained): the
	// evacuation controller migrates it, or (evictionStrategy External) leaves it to an
	// external controller.
	// +optional
	EvacuationNodeName string `json:"evacuationNodeName,omitempty"`
	// Represents the status of a live migration.
	// +optional
	MigrationState *VirtualMachineInstanceMigrationState `json:"migrationState,omitempty"`
	// VolumeStatus contains the statuses of all the volumes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=128
	VolumeStatus []VolumeStatus `json:"volumeStatus,omitempty"`
	// Machine is the machine type the guest runs: the versioned one QEMU resolved (e.g.
	// pc-q35-7.2), which a migration target reproduces.
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// MigrationMethod is how the vmi migrates: BlockMigration when node-local disks are
	// copied with it, LiveMigration when every disk is shared.
	// +optional
	MigrationMethod VirtualMachineInstanceMigrationMethod `json:"migrationMethod,omitempty"`
	// SelinuxContext is the SELinux context of the vmi's launcher, whose level the agent
	// labelled the vmi's files at (KubeVirt's field): "none" where the node's SELinux is
	// disabled and nothing was labelled. A migration target keeps its level unless the
	// migration configuration's matchSELinuxLevelOnMigration is false.
	// +optional
	SelinuxContext string `json:"selinuxContext,omitempty"`
	// CurrentCPUTopology is the vCPU topology the guest has now (plugged sockets included);
	// set when the vmi can hotplug CPUs (spec.domain.cpu.maxSockets).
	// +optional
	CurrentCPUTopology *CPUTopology `json:"currentCPUTopology,omitempty"`
	// Memory is the guest memory at boot, now and as requested; set when the vmi can hotplug
	// memory (spec.domain.memory.maxGuest).
	// +optional
	Memory *MemoryStatus `json:"memory,omitempty"`
	// Launcher is vmlet-specific (not part of kubevirt.io/v1): the QEMU process that runs this
	// vmi and how it accelerates the guest.
	// +optional
	Launcher *LauncherStatus `json:"launcher,omitempty"`
}

// VirtualMachineInstancePhaseTransitionTimestamp gives a timestamp in relation to when a phase
// is set on a vmi.
type VirtualMachineInstancePhaseTransitionTimestamp struct {
	// Phase is the status of the VirtualMachineInstance in kubernetes world. It is not the
	// VirtualMachineInstance status, but partially correlates to it.
	// +optional
	Phase VirtualMachineInstancePhase `json:"phase,omitempty"`
	// PhaseTransitionTimestamp is the timestamp of when the phase change occurred.
	// +optional
	PhaseTransitionTimestamp metav1.Time `json:"phaseTransitionTimestamp,omitempty"`
}

// VirtualMachineInstanceNetworkInterface is the observed state of one guest interface.
type VirtualMachineInstanceNetworkInterface struct {
	// IP address of a Virtual Machine interface. It is always the first item of IPs.
	// +optional
	IP string `json:"ipAddress,omitempty"`
	// Hardware address of a Virtual Machine interface.
	// +optional
	MAC string `json:"mac,omitempty"`
	// Name of the interface, corresponds to name of the network assigned to the interface.
	// +optional
	Name string `json:"name,omitempty"`
	// List of all IP addresses of a Virtual Machine interface.
	// +optional
	// +listType=atomic
	IPs []string `json:"ipAddresses,omitempty"`
	// PodInterfaceName represents the name of the pod network interface.
	// +optional
	PodInterfaceName string `json:"podInterfaceName,omitempty"`
	// The interface name inside the Virtual Machine.
	// +optional
	InterfaceName string `json:"interfaceName,omitempty"`
	// Specifies the origin of the interface data collected. values: domain, guest-agent.
	// +optional
	InfoSource string `json:"infoSource,omitempty"`
	// Specifies how many queues are allocated by MultiQueue.
	// +optional
	QueueCount int32 `json:"queueCount,omitempty"`
}

// VirtualMachineInstanceGuestOSInfo is what the guest agent says about the guest OS.
type VirtualMachineInstanceGuestOSInfo struct {
	// Name of the Guest OS.
	// +optional
	Name string `json:"name,omitempty"`
	// Guest OS Kernel Release.
	// +optional
	KernelRelease string `json:"kernelRelease,omitempty"`
	// Guest OS Version.
	// +optional
	Version string `json:"version,omitempty"`
	// Guest OS Pretty Name.
	// +optional
	PrettyName string `json:"prettyName,omitempty"`
	// Version ID of the Guest OS.
	// +optional
	VersionID string `json:"versionId,omitempty"`
	// Kernel version of the Guest OS.
	// +optional
	KernelVersion string `json:"kernelVersion,omitempty"`
	// Machine type of the Guest OS.
	// +optional
	Machine string `json:"machine,omitempty"`
	// Guest OS Id.
	// +optional
	ID string `json:"id,omitempty"`
}

// VolumePhase indicates the current phase of a volume (and of its hotplug).
type VolumePhase string

// Volume phases.
const (
	// VolumePending means the Volume is pending and cannot be attached to the node yet.
	VolumePending VolumePhase = "Pending"
	// VolumeBound means the Volume is bound and can be attach to the node.
	VolumeBound VolumePhase = "Bound"
	// HotplugVolumeAttachedToNode means the volume has been attached to the node.
	HotplugVolumeAttachedToNode VolumePhase = "AttachedToNode"
	// HotplugVolumeMounted means the volume is mounted where the launcher can open it.
	HotplugVolumeMounted VolumePhase = "MountedToPod"
	// VolumeReady means the volume is ready to be used by the VirtualMachineInstance.
	VolumeReady VolumePhase = "Ready"
	// HotplugVolumeDetaching means the volume is being detached from the guest and the node.
	HotplugVolumeDetaching VolumePhase = "Detaching"
	// HotplugVolumeUnMounted means the volume has been unmounted from the launcher.
	HotplugVolumeUnMounted VolumePhase = "UnMountedFromPod"
)

// VolumeStatus represents information about the status of volumes attached to the
// VirtualMachineInstance.
type VolumeStatus struct {
	// Name is the name of the volume.
	Name string `json:"name"`
	// Target is the target name used when adding the volume to the VM, eg: vda.
	// +optional
	Target string `json:"target"`
	// Phase is the phase.
	// +optional
	Phase VolumePhase `json:"phase,omitempty"`
	// Reason is a brief description of why we are in the current hotplug volume phase.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a detailed message about the current hotplug volume phase.
	// +optional
	Message string `json:"message,omitempty"`
	// If the volume is hotplug, this will contain the hotplug status.
	// +optional
	HotplugVolume *HotplugVolumeStatus `json:"hotplugVolume,omitempty"`
	// Represents the size of the volume.
	// +optional
	Size int64 `json:"size,omitempty"`
	// PersistentVolumeClaimInfo is the claim behind a persistentVolumeClaim, dataVolume or
	// ephemeral volume, as mounted (cluster mode).
	// +optional
	PersistentVolumeClaimInfo *PersistentVolumeClaimInfo `json:"persistentVolumeClaimInfo,omitempty"`
}

// PersistentVolumeClaimInfo describes a volume's PersistentVolumeClaim (KubeVirt's fields that
// vmlet fills).
type PersistentVolumeClaimInfo struct {
	// ClaimName is the claim's name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ClaimName string `json:"claimName,omitempty"`
	// AccessModes are the bound claim's access modes: ReadWriteMany claims are shared
	// between nodes, so they do not stop a live migration.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	AccessModes []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
	// VolumeMode is the claim's volume mode (Filesystem: disk.img in the volume; Block).
	// +optional
	VolumeMode *corev1.PersistentVolumeMode `json:"volumeMode,omitempty"`
	// Capacity is the bound claim's capacity.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
}

// HotplugVolumeStatus represents the hotplug status of the volume.
type HotplugVolumeStatus struct {
	// AttachPodName is the name of the pod used to attach the volume to the node.
	// +optional
	AttachPodName string `json:"attachPodName,omitempty"`
	// AttachPodUID is the UID of the pod used to attach the volume to the node.
	// +optional
	AttachPodUID types.UID `json:"attachPodUID,omitempty"`
}

// Accelerator is how QEMU executes guest code.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=kvm;tcg
type Accelerator string

// Accelerators.
const (
	// AcceleratorKVM: hardware virtualization through /dev/kvm.
	AcceleratorKVM Accelerator = "kvm"
	// AcceleratorTCG: QEMU's software emulation (much slower).
	AcceleratorTCG Accelerator = "tcg"
)

// LauncherStatus is vmlet-specific: the launcher process and QEMU that run the vmi.
type LauncherStatus struct {
	// PID of the QEMU process on the node (in the node agent's PID namespace).
	// +optional
	PID int64 `json:"pid,omitempty"`
	// Pod is the name of the launcher pod, if the vmi runs in one.
	// +optional
	Pod string `json:"pod,omitempty"`
	// Accelerator QEMU uses: kvm or tcg.
	// +optional
	Accelerator Accelerator `json:"accelerator,omitempty"`
	// AccelerationReason says why this accelerator was chosen, e.g. why KVM was not usable.
	// +optional
	AccelerationReason string `json:"accelerationReason,omitempty"`
	// QEMUVersion is the version QEMU reports over QMP (query-version), e.g. "7.2.15".
	// +optional
	QEMUVersion string `json:"qemuVersion,omitempty"`
	// SocketsAtBoot is the number of vCPU sockets QEMU was started with (-smp sockets) when
	// the vmi can hotplug CPUs; the others present were plugged. A migration target and the
	// agent's later syncs start from it, whatever spec.domain.cpu.sockets says now.
	// +optional
	SocketsAtBoot int32 `json:"socketsAtBoot,omitempty"`
}

// VirtualMachineInstanceMigrationMethod says how a vmi's disks move with it.
// +kubebuilder:validation:Enum=BlockMigration;LiveMigration
type VirtualMachineInstanceMigrationMethod string

// Migration methods.
const (
	// BlockMigration: node-local disks are copied during the migration.
	BlockMigration VirtualMachineInstanceMigrationMethod = "BlockMigration"
	// LiveMigration: every disk is shared storage; only memory and device state move.
	LiveMigration VirtualMachineInstanceMigrationMethod = "LiveMigration"
)

// CPUTopology is a vCPU topology: sockets × cores × threads.
type CPUTopology struct {
	// Cores specifies the number of cores inside the vmi.
	// +optional
	Cores uint32 `json:"cores,omitempty"`
	// Sockets specifies the number of sockets inside the vmi.
	// +optional
	Sockets uint32 `json:"sockets,omitempty"`
	// Threads specifies the number of threads inside the vmi.
	// +optional
	Threads uint32 `json:"threads,omitempty"`
}

// MemoryStatus is the guest memory of a vmi that can hotplug memory.
type MemoryStatus struct {
	// GuestAtBoot specifies with what amount of memory the guest booted: spec.domain.memory.guest
	// cannot go below it.
	// +optional
	GuestAtBoot *resource.Quantity `json:"guestAtBoot,omitempty"`
	// GuestCurrent specifies how much memory is currently available for the guest: the boot
	// memory plus what the guest's virtio-mem driver plugged.
	// +optional
	GuestCurrent *resource.Quantity `json:"guestCurrent,omitempty"`
	// GuestRequested specifies how much memory was requested (hotplug) for the guest.
	// +optional
	GuestRequested *resource.Quantity `json:"guestRequested,omitempty"`
}
