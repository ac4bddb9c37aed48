package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

// DomainSpec is the virtual hardware of a VirtualMachineInstance (kubevirt.io/v1 DomainSpec,
// trimmed to what vmlet implements).
type DomainSpec struct {
	// Resources describes the Compute Resources required by this vmi.
	// +optional
	Resources ResourceRequirements `json:"resources,omitempty"`
	// CPU allow specified the detailed CPU topology inside the vmi.
	// +optional
	CPU *CPU `json:"cpu,omitempty"`
	// Memory allow specifying the VMI memory features.
	// +optional
	Memory *Memory `json:"memory,omitempty"`
	// Machine type.
	// +optional
	Machine *Machine `json:"machine,omitempty"`
	// Firmware.
	// +optional
	Firmware *Firmware `json:"firmware,omitempty"`
	// Devices allows adding disks, network interfaces, and others.
	Devices Devices `json:"devices"`
}

// ResourceName is the name of a compute resource, e.g. "cpu" or "memory".
type ResourceName string

// Resource names used in ResourceRequirements.
const (
	// ResourceCPU is CPU, in cores (500m = .5 cores).
	ResourceCPU ResourceName = "cpu"
	// ResourceMemory is memory, in bytes (500Gi = 500GiB = 500 * 1024 * 1024 * 1024).
	ResourceMemory ResourceName = "memory"
)

// ResourceList is a set of (resource name, quantity) pairs, like core/v1 ResourceList.
// +kubebuilder:validation:MaxProperties=16
// +kubebuilder:validation:XValidation:rule="self.all(k, !isQuantity(string(self[k])) || quantity(string(self[k])).compareTo(quantity('0')) >= 0)",message="resource quantities must not be negative"
type ResourceList map[ResourceName]resource.Quantity

// ResourceRequirements describes the compute resources of the vmi's launcher.
type ResourceRequirements struct {
	// Requests is a description of the initial vmi resources.
	// Valid resource keys are "memory" and "cpu".
	// +optional
	Requests ResourceList `json:"requests,omitempty"`
	// Limits describes the maximum amount of compute resources allowed.
	// Valid resource keys are "memory" and "cpu".
	// +optional
	Limits ResourceList `json:"limits,omitempty"`
	// Don't ask the scheduler to take the guest-management overhead into account. Instead
	// put the overhead only into the container's memory limit. This can lead to crashes if
	// all memory is in use on a node. Defaults to false.
	// +optional
	OvercommitGuestOverhead bool `json:"overcommitGuestOverhead,omitempty"`
}

// MaxVCPUs is the largest vCPU count (sockets * cores * threads) the API accepts. The QEMU
// machine type may impose a lower limit, which the node agent reports.
const MaxVCPUs = 512

// CPU allows specifying the CPU topology.
//
// +kubebuilder:validation:XValidation:rule="self.?sockets.orValue(1) * self.?cores.orValue(1) * self.?threads.orValue(1) <= 512",message="sockets * cores * threads must not exceed 512 vCPUs"
// +kubebuilder:validation:XValidation:rule="!has(self.maxSockets) || self.?sockets.orValue(1) <= self.maxSockets",message="spec.domain.cpu.sockets must not exceed spec.domain.cpu.maxSockets",fieldPath=".sockets"
// +kubebuilder:validation:XValidation:rule="!has(self.maxSockets) || self.maxSockets * self.?cores.orValue(1) * self.?threads.orValue(1) <= 512",message="maxSockets * cores * threads must not exceed 512 vCPUs",fieldPath=".maxSockets"
type CPU struct {
	// Cores specifies the number of cores inside the vmi.
	// Must be a value greater or equal 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	Cores uint32 `json:"cores,omitempty"`
	// Sockets specifies the number of sockets inside the vmi.
	// Must be a value greater or equal 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	Sockets uint32 `json:"sockets,omitempty"`
	// Threads specifies the number of threads inside the vmi.
	// Must be a value greater or equal 1.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	Threads uint32 `json:"threads,omitempty"`
	// Model specifies the CPU model inside the VMI.
	// List of available models https://github.com/libvirt/libvirt/tree/master/src/cpu_map.
	// It is possible to specify special cases like "host-passthrough" to get the same CPU as
	// the node and "host-model" to get CPU closest to the node one.
	// Defaults to host-model. For live migration across hosts use a named model.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._-]*$`
	Model string `json:"model,omitempty"`
	// MaxSockets specifies the maximum amount of sockets that can be hotplugged: sockets may
	// change on the running vmi within [1, maxSockets] (CPU hotplug). Unset: sockets is fixed
	// (vmlet does not default it; KubeVirt's VM controller sets 4 × sockets for VMs with the
	// LiveUpdate rollout strategy).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	MaxSockets uint32 `json:"maxSockets,omitempty"`
}

// Memory allows specifying the VirtualMachineInstance memory features.
//
// +kubebuilder:validation:XValidation:rule="!has(self.maxGuest) || has(self.guest)",message="spec.domain.memory.maxGuest needs spec.domain.memory.guest",fieldPath=".maxGuest"
// +kubebuilder:validation:XValidation:rule="!has(self.maxGuest) || !has(self.guest) || !isQuantity(string(self.guest)) || !isQuantity(string(self.maxGuest)) || quantity(string(self.guest)).compareTo(quantity(string(self.maxGuest))) <= 0",message="spec.domain.memory.guest must not exceed spec.domain.memory.maxGuest",fieldPath=".guest"
// +kubebuilder:validation:XValidation:rule="!has(self.maxGuest) || !isQuantity(string(self.maxGuest)) || quantity(string(self.maxGuest)).compareTo(quantity('4Ti')) <= 0",message="spec.domain.memory.maxGuest must be at most 4Ti (QEMU's limit in vmlet)",fieldPath=".maxGuest"
type Memory struct {
	// Guest allows to specifying the amount of memory which is visible inside the Guest OS.
	// The Guest must lie between Requests and Limits from the resources section.
	// Defaults to the requested memory in the resources section if not specified.
	// Must be at least 64Mi and at most 4Ti (the most vmlet gives QEMU).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('64Mi')) >= 0 && quantity(string(self)).compareTo(quantity('4Ti')) <= 0)",message="guest memory must be between 64Mi and 4Ti"
	Guest *resource.Quantity `json:"guest,omitempty"`
	// MaxGuest allows to specify the maximum amount of memory which is visible inside the
	// Guest OS: guest may change on the running vmi within [the guest memory at boot,
	// maxGuest] (memory hotplug through a virtio-mem device). Needs guest. Unset: guest is
	// fixed (vmlet does not default it; KubeVirt's VM controller sets 4 × guest for VMs with
	// the LiveUpdate rollout strategy).
	// +optional
	MaxGuest *resource.Quantity `json:"maxGuest,omitempty"`
}

// Machine selects the QEMU machine type.
type Machine struct {
	// QEMU machine type is the actual chipset of the VirtualMachineInstance, e.g. "q35" or a
	// versioned type such as "pc-q35-7.2" (needed for migration across QEMU versions).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]*$`
	Type string `json:"type"`
}

// Firmware describes the firmware, SMBIOS identity and direct kernel boot of the guest.
type Firmware struct {
	// UUID reported by the vmi bios.
	// Defaults to a random generated uid.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`
	UUID types.UID `json:"uuid,omitempty"`
	// Settings to control the bootloader that is used.
	// +optional
	Bootloader *Bootloader `json:"bootloader,omitempty"`
	// The system-serial-number in SMBIOS.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 ._:/+-]*$`
	Serial string `json:"serial,omitempty"`
	// Settings to set the kernel for booting.
	// +optional
	KernelBoot *KernelBoot `json:"kernelBoot,omitempty"`
}

// Bootloader represents the firmware blob used to assist in the domain creation process.
// Only one of its members may be specified; BIOS is the default.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.bios) && has(self.efi))",message="bios and efi are mutually exclusive"
type Bootloader struct {
	// If set (default), BIOS will be used.
	// +optional
	BIOS *BIOS `json:"bios,omitempty"`
	// If set, EFI will be used instead of BIOS.
	// +optional
	EFI *EFI `json:"efi,omitempty"`
}

// BIOS selects SeaBIOS (the default).
type BIOS struct {
	// If set, the BIOS output will be transmitted over serial.
	// +optional
	UseSerial *bool `json:"useSerial,omitempty"`
}

// EFI selects OVMF instead of BIOS.
type EFI struct {
	// If set, SecureBoot will be enabled and the OVMF roms will be swapped for
	// SecureBoot-enabled ones.
	// Defaults to true, as in KubeVirt.
	// +optional
	SecureBoot *bool `json:"secureBoot,omitempty"`
}

// KernelBoot represents the firmware blob used to assist in the kernel boot process.
// Used for setting the kernel, initrd and command line arguments.
type KernelBoot struct {
	// Arguments to be passed to the kernel at boot time. At most 2047 bytes: x86's
	// COMMAND_LINE_SIZE (2048) holds the terminating NUL too, and QEMU refuses a longer one.
	// +optional
	// +kubebuilder:validation:MaxLength=2047
	// +kubebuilder:validation:Pattern=`^[^\x00\r\n]*$`
	KernelArgs string `json:"kernelArgs,omitempty"`
	// Container defines the container that contains kernel artifacts.
	// +optional
	Container *KernelBootContainer `json:"container,omitempty"`
}

// PullPolicy describes a policy for if/when to pull a container image.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=Always;Never;IfNotPresent
type PullPolicy string

// Image pull policies, as in core/v1.
const (
	PullAlways       PullPolicy = "Always"
	PullNever        PullPolicy = "Never"
	PullIfNotPresent PullPolicy = "IfNotPresent"
)

// KernelBootContainer is a container image that holds a kernel and/or an initrd.
//
// +kubebuilder:validation:XValidation:rule="has(self.kernelPath) || has(self.initrdPath)",message="at least one of kernelPath and initrdPath must be set"
type KernelBootContainer struct {
	// Image that contains initrd / kernel files.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`
	Image string `json:"image"`
	// Image pull policy.
	// One of Always, Never, IfNotPresent.
	// Defaults to Always if :latest tag is specified, or IfNotPresent otherwise.
	// Cannot be updated.
	// More info: https://kubernetes.io/docs/concepts/containers/images#updating-images
	// +optional
	ImagePullPolicy PullPolicy `json:"imagePullPolicy,omitempty"`
	// ImagePullSecret is the name of a Secret in the VMI's namespace, of type
	// kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg, whose credentials the node
	// uses to pull the image.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ImagePullSecret string `json:"imagePullSecret,omitempty"`
	// The fully-qualified path to the kernel image in the host OS.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*)+$`
	KernelPath string `json:"kernelPath,omitempty"`
	// the fully-qualified path to the ramdisk image in the host OS.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*)+$`
	InitrdPath string `json:"initrdPath,omitempty"`
}
