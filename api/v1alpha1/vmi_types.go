package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualMachineInstance is *the* VirtualMachineInstance definition. It represents a virtual
// machine in the runtime environment of Kubernetes, run by vmlet's node agent with QEMU driven
// directly over QMP. Its spec is the kubevirt.io/v1 VirtualMachineInstance spec trimmed to what
// vmlet implements, plus spec.paused.
//
// The spec is immutable after creation, like KubeVirt's, except spec.paused, hotpluggable
// volumes (persistentVolumeClaim or dataVolume with hotpluggable: true) and their disks,
// spec.domain.cpu.sockets within [1, maxSockets] and spec.domain.memory.guest within [the
// guest memory at boot, maxGuest] (CPU and memory hotplug).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.status) || !has(oldSelf.status.memory) || !has(oldSelf.status.memory.guestAtBoot) || !has(self.spec.domain.memory) || !has(self.spec.domain.memory.guest) || (has(oldSelf.spec.domain.memory) && has(oldSelf.spec.domain.memory.guest) && string(self.spec.domain.memory.guest) == string(oldSelf.spec.domain.memory.guest)) || !isQuantity(string(self.spec.domain.memory.guest)) || !isQuantity(string(oldSelf.status.memory.guestAtBoot)) || quantity(string(self.spec.domain.memory.guest)).compareTo(quantity(string(oldSelf.status.memory.guestAtBoot))) >= 0",message="spec.domain.memory.guest must not go below status.memory.guestAtBoot (the memory the guest booted with: virtio-mem unplugs only what it plugged)",fieldPath=".spec.domain.memory.guest"
// +kubebuilder:resource:shortName={vmi,vmis},categories=all
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="IP",type="string",JSONPath=".status.interfaces[0].ipAddress"
// +kubebuilder:printcolumn:name="NodeName",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Live-Migratable",type="string",JSONPath=".status.conditions[?(@.type=='LiveMigratable')].status",priority=1
// +kubebuilder:printcolumn:name="Paused",type="string",JSONPath=".status.conditions[?(@.type=='Paused')].status",priority=1
// +kubebuilder:selectablefield:JSONPath=".status.nodeName"
type VirtualMachineInstance struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// VirtualMachineInstance Spec contains the VirtualMachineInstance specification.
	// Immutable except spec.paused, hotpluggable volumes and their disks, and interfaces of
	// multus networks (hotplug; state: absent unplugs).
	// +kubebuilder:validation:XValidation:rule="has(self.domain.resources) == has(oldSelf.domain.resources) && (!has(self.domain.resources) || self.domain.resources == oldSelf.domain.resources) && has(self.domain.cpu) == has(oldSelf.domain.cpu) && (!has(self.domain.cpu) || ((has(self.domain.cpu.cores) == has(oldSelf.domain.cpu.cores) && (!has(self.domain.cpu.cores) || self.domain.cpu.cores == oldSelf.domain.cpu.cores)) && (has(self.domain.cpu.threads) == has(oldSelf.domain.cpu.threads) && (!has(self.domain.cpu.threads) || self.domain.cpu.threads == oldSelf.domain.cpu.threads)) && (has(self.domain.cpu.model) == has(oldSelf.domain.cpu.model) && (!has(self.domain.cpu.model) || self.domain.cpu.model == oldSelf.domain.cpu.model)) && (has(self.domain.cpu.maxSockets) == has(oldSelf.domain.cpu.maxSockets) && (!has(self.domain.cpu.maxSockets) || self.domain.cpu.maxSockets == oldSelf.domain.cpu.maxSockets)))) && has(self.domain.memory) == has(oldSelf.domain.memory) && (!has(self.domain.memory) || (has(self.domain.memory.maxGuest) == has(oldSelf.domain.memory.maxGuest) && (!has(self.domain.memory.maxGuest) || string(self.domain.memory.maxGuest) == string(oldSelf.domain.memory.maxGuest)))) && has(self.domain.machine) == has(oldSelf.domain.machine) && (!has(self.domain.machine) || self.domain.machine == oldSelf.domain.machine) && has(self.domain.firmware) == has(oldSelf.domain.firmware) && (!has(self.domain.firmware) || self.domain.firmware == oldSelf.domain.firmware)",message="spec.domain is immutable (only hotpluggable volumes and their disks, spec.domain.cpu.sockets up to maxSockets and spec.domain.memory.guest up to maxGuest may change)",fieldPath=".domain"
	// +kubebuilder:validation:XValidation:rule="!has(self.domain.cpu) || !has(oldSelf.domain.cpu) || self.domain.cpu.?sockets.orValue(1) == oldSelf.domain.cpu.?sockets.orValue(1) || has(oldSelf.domain.cpu.maxSockets)",message="spec.domain.cpu.sockets can change on a running vmi only when spec.domain.cpu.maxSockets was set at creation (CPU hotplug)",fieldPath=".domain.cpu.sockets"
	// +kubebuilder:validation:XValidation:rule="!has(self.domain.memory) || !has(oldSelf.domain.memory) || (has(self.domain.memory.guest) == has(oldSelf.domain.memory.guest) && (!has(self.domain.memory.guest) || string(self.domain.memory.guest) == string(oldSelf.domain.memory.guest))) || has(oldSelf.domain.memory.maxGuest)",message="spec.domain.memory.guest can change on a running vmi only when spec.domain.memory.maxGuest was set at creation (memory hotplug)",fieldPath=".domain.memory.guest"
	// +kubebuilder:validation:XValidation:rule="has(self.domain.devices.rng) == has(oldSelf.domain.devices.rng) && (!has(self.domain.devices.rng) || self.domain.devices.rng == oldSelf.domain.devices.rng) && has(self.domain.devices.autoattachPodInterface) == has(oldSelf.domain.devices.autoattachPodInterface) && (!has(self.domain.devices.autoattachPodInterface) || self.domain.devices.autoattachPodInterface == oldSelf.domain.devices.autoattachPodInterface) && has(self.domain.devices.autoattachSerialConsole) == has(oldSelf.domain.devices.autoattachSerialConsole) && (!has(self.domain.devices.autoattachSerialConsole) || self.domain.devices.autoattachSerialConsole == oldSelf.domain.devices.autoattachSerialConsole) && has(self.domain.devices.autoattachGraphicsDevice) == has(oldSelf.domain.devices.autoattachGraphicsDevice) && (!has(self.domain.devices.autoattachGraphicsDevice) || self.domain.devices.autoattachGraphicsDevice == oldSelf.domain.devices.autoattachGraphicsDevice) && has(self.domain.devices.networkInterfaceMultiqueue) == has(oldSelf.domain.devices.networkInterfaceMultiqueue) && (!has(self.domain.devices.networkInterfaceMultiqueue) || self.domain.devices.networkInterfaceMultiqueue == oldSelf.domain.devices.networkInterfaceMultiqueue) && has(self.domain.devices.autoattachMemBalloon) == has(oldSelf.domain.devices.autoattachMemBalloon) && (!has(self.domain.devices.autoattachMemBalloon) || self.domain.devices.autoattachMemBalloon == oldSelf.domain.devices.autoattachMemBalloon) && has(self.domain.devices.panicDevices) == has(oldSelf.domain.devices.panicDevices) && (!has(self.domain.devices.panicDevices) || self.domain.devices.panicDevices == oldSelf.domain.devices.panicDevices)",message="spec.domain.devices is immutable (only disks of hotpluggable volumes and interfaces of multus networks may be added or removed)",fieldPath=".domain.devices"
	// +kubebuilder:validation:XValidation:rule="(!has(oldSelf.domain.devices.interfaces) || oldSelf.domain.devices.interfaces.all(o, (has(oldSelf.networks) && oldSelf.networks.exists(n, n.name == o.name && has(n.multus))) || (has(self.domain.devices.interfaces) && self.domain.devices.interfaces.exists(i, i == o)))) && (!has(self.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, (has(self.networks) && self.networks.exists(n, n.name == i.name && has(n.multus))) || (has(oldSelf.domain.devices.interfaces) && oldSelf.domain.devices.interfaces.exists(o, o == i))))",message="interfaces of the pod network are immutable: only interfaces of multus networks may be added (hotplug), set to state: absent (hot-unplug) or removed",fieldPath=".domain.devices.interfaces"
	// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.interfaces) || !has(oldSelf.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, !oldSelf.domain.devices.interfaces.exists(o, o.name == i.name) || oldSelf.domain.devices.interfaces.exists(o, o.name == i.name && (o == i || (i.?state.orValue('') == 'absent' && o.?state.orValue('') != 'absent'))))",message="an existing interface may only change to state: absent (hot-unplug); remove it and add it again to change it",fieldPath=".domain.devices.interfaces"
	// +kubebuilder:validation:XValidation:rule="has(oldSelf.domain.devices.interfaces) || has(oldSelf.networks) || !has(self.domain.devices.interfaces) || !oldSelf.domain.devices.?autoattachPodInterface.orValue(true)",message="this VMI's pod interface was attached automatically (it lists no interfaces): hotplugging interfaces needs the pod interface listed at creation, or autoattachPodInterface: false",fieldPath=".domain.devices.interfaces"
	// +kubebuilder:validation:XValidation:rule="(!has(oldSelf.domain.devices.disks) || oldSelf.domain.devices.disks.all(d, (has(self.domain.devices.disks) && self.domain.devices.disks.exists(n, n == d)) || (has(oldSelf.volumes) && oldSelf.volumes.exists(v, v.name == d.name && (v.?persistentVolumeClaim.?hotpluggable.orValue(false) || v.?dataVolume.?hotpluggable.orValue(false)))))) && (!has(self.domain.devices.disks) || self.domain.devices.disks.all(d, (has(oldSelf.domain.devices.disks) && oldSelf.domain.devices.disks.exists(o, o == d)) || (has(self.volumes) && self.volumes.exists(v, v.name == d.name && (v.?persistentVolumeClaim.?hotpluggable.orValue(false) || v.?dataVolume.?hotpluggable.orValue(false))))))",message="disks are immutable: only disks of hotpluggable volumes may be added or removed",fieldPath=".domain.devices.disks"
	// +kubebuilder:validation:XValidation:rule="(!has(oldSelf.volumes) || oldSelf.volumes.all(v, (has(self.volumes) && self.volumes.exists(n, n == v)) || (v.?persistentVolumeClaim.?hotpluggable.orValue(false) || v.?dataVolume.?hotpluggable.orValue(false)))) && (!has(self.volumes) || self.volumes.all(v, (has(oldSelf.volumes) && oldSelf.volumes.exists(o, o == v)) || (v.?persistentVolumeClaim.?hotpluggable.orValue(false) || v.?dataVolume.?hotpluggable.orValue(false))))",message="volumes are immutable: only hotpluggable volumes may be added or removed",fieldPath=".volumes"
	// +kubebuilder:validation:XValidation:rule="(has(self.networks) ? self.networks.filter(n, has(n.pod)) : []) == (has(oldSelf.networks) ? oldSelf.networks.filter(n, has(n.pod)) : []) && (!has(self.networks) || !has(oldSelf.networks) || self.networks.all(n, !oldSelf.networks.exists(o, o.name == n.name) || oldSelf.networks.exists(o, o == n)))",message="spec.networks is immutable except that multus networks may be added or removed",fieldPath=".networks"
	// +kubebuilder:validation:XValidation:rule="has(self.nodeSelector) == has(oldSelf.nodeSelector) && (!has(self.nodeSelector) || self.nodeSelector == oldSelf.nodeSelector) && has(self.evictionStrategy) == has(oldSelf.evictionStrategy) && (!has(self.evictionStrategy) || self.evictionStrategy == oldSelf.evictionStrategy) && has(self.terminationGracePeriodSeconds) == has(oldSelf.terminationGracePeriodSeconds) && (!has(self.terminationGracePeriodSeconds) || self.terminationGracePeriodSeconds == oldSelf.terminationGracePeriodSeconds) && has(self.hostname) == has(oldSelf.hostname) && (!has(self.hostname) || self.hostname == oldSelf.hostname) && has(self.subdomain) == has(oldSelf.subdomain) && (!has(self.subdomain) || self.subdomain == oldSelf.subdomain) && has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) || self.tolerations == oldSelf.tolerations)",message="spec is immutable except spec.paused and hotpluggable volumes"
	Spec VirtualMachineInstanceSpec `json:"spec"`
	// Status is the high level overview of how the VirtualMachineInstance is doing. It contains
	// information available to controllers and users.
	// +optional
	Status VirtualMachineInstanceStatus `json:"status,omitempty"`
}

// VirtualMachineInstanceList is a list of VirtualMachineInstances.
//
// +kubebuilder:object:root=true
type VirtualMachineInstanceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineInstance `json:"items"`
}

// EvictionStrategy describes what happens to a VirtualMachineInstance when its node is drained.
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:Enum=None;LiveMigrate;LiveMigrateIfPossible;External
type EvictionStrategy string

// Eviction strategies (KubeVirt's values and meaning).
const (
	// EvictionStrategyNone: no action is taken; the VirtualMachineInstance is shut down with its
	// node.
	EvictionStrategyNone EvictionStrategy = "None"
	// EvictionStrategyLiveMigrate: the VirtualMachineInstance is migrated instead of shut down;
	// one that cannot migrate blocks the drain.
	EvictionStrategyLiveMigrate EvictionStrategy = "LiveMigrate"
	// EvictionStrategyLiveMigrateIfPossible: migrate if LiveMigratable, otherwise shut down.
	EvictionStrategyLiveMigrateIfPossible EvictionStrategy = "LiveMigrateIfPossible"
	// EvictionStrategyExternal: status.evacuationNodeName is set and the drain is blocked; an
	// external controller acts on it.
	EvictionStrategyExternal EvictionStrategy = "External"
)

// VirtualMachineInstanceSpec is a description of a VirtualMachineInstance.
//
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.disks) || self.domain.devices.disks.all(d, has(self.volumes) && self.volumes.exists(v, v.name == d.name))",message="every disk must reference a volume of the same name",fieldPath=".domain.devices.disks"
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.disks) || self.domain.devices.disks.all(d, !has(d.lun) || (has(self.volumes) && self.volumes.exists(v, v.name == d.name && (has(v.persistentVolumeClaim) || has(v.dataVolume)))))",message="a lun disk can only be mapped to a persistentVolumeClaim or dataVolume volume",fieldPath=".domain.devices.disks"
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, has(self.networks) && self.networks.exists(n, n.name == i.name))",message="every interface must reference a network of the same name",fieldPath=".domain.devices.interfaces"
// +kubebuilder:validation:XValidation:rule="!has(self.networks) || self.networks.all(n, has(self.domain.devices.interfaces) && self.domain.devices.interfaces.exists(i, i.name == n.name))",message="every network must be used by an interface of the same name",fieldPath=".networks"
// +kubebuilder:validation:XValidation:rule="!has(self.networks) || self.networks.filter(n, has(n.pod)).size() <= 1",message="at most one pod network may be defined",fieldPath=".networks"
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, !has(i.masquerade) || !has(self.networks) || !self.networks.exists(n, n.name == i.name && has(n.multus)))",message="masquerade is supported on the pod network only: interfaces of multus networks use bridge",fieldPath=".domain.devices.interfaces"
// +kubebuilder:validation:XValidation:rule="!has(self.domain.devices.interfaces) || self.domain.devices.interfaces.all(i, !has(i.state) || (has(self.networks) && self.networks.exists(n, n.name == i.name && has(n.multus))))",message="only interfaces of multus networks can be hot-unplugged (state: absent)",fieldPath=".domain.devices.interfaces"
// +kubebuilder:validation:XValidation:rule="(has(self.domain.memory) && has(self.domain.memory.guest)) || (has(self.domain.resources) && ((has(self.domain.resources.requests) && 'memory' in self.domain.resources.requests) || (has(self.domain.resources.limits) && 'memory' in self.domain.resources.limits)))",message="no memory requested: set spec.domain.memory.guest, spec.domain.resources.requests.memory or spec.domain.resources.limits.memory",fieldPath=".domain"
// +kubebuilder:validation:XValidation:rule="!(has(self.domain.memory) && has(self.domain.memory.guest) && has(self.domain.resources) && has(self.domain.resources.limits) && 'memory' in self.domain.resources.limits) || !isQuantity(string(self.domain.memory.guest)) || !isQuantity(string(self.domain.resources.limits['memory'])) || quantity(string(self.domain.memory.guest)).compareTo(quantity(string(self.domain.resources.limits['memory']))) <= 0",message="spec.domain.memory.guest must not exceed spec.domain.resources.limits.memory",fieldPath=".domain.memory.guest"
type VirtualMachineInstanceSpec struct {
	// Specification of the desired behavior of the VirtualMachineInstance on the host.
	Domain DomainSpec `json:"domain"`

	// NodeSelector is a selector which must be true for the vmi to fit on a node.
	// Selector which must match a node's labels for the vmi to be scheduled on that node.
	// More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// If toleration is specified, obey all the toleration rules.
	// The VMI's launcher (its pod in cluster mode) tolerates these taints; local mode's
	// scheduler and the choice of a migration target honour them the way kube-scheduler's
	// TaintToleration filter does (NoSchedule and NoExecute; PreferNoSchedule is ignored).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator in ['', 'Exists', 'Equal'])",message="operator must be Exists or Equal"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="effect must be NoSchedule, PreferNoSchedule or NoExecute"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",message="value must be empty when operator is Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, has(t.key) && t.key != '' || has(t.operator) && t.operator == 'Exists')",message="an empty key needs operator Exists"
	// +kubebuilder:validation:XValidation:rule="self.all(t, !has(t.tolerationSeconds) || has(t.effect) && t.effect == 'NoExecute')",message="tolerationSeconds needs effect NoExecute"
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// EvictionStrategy describes the strategy to follow when a node drain occurs.
	// The possible options are:
	// - "None": No action will be taken; the VirtualMachineInstance is shut down.
	// - "LiveMigrate": the VirtualMachineInstance will be migrated instead of being shutdown.
	// - "LiveMigrateIfPossible": the same as "LiveMigrate" but only if the VirtualMachineInstance
	//   is Live-Migratable, otherwise it will behave as "None".
	// - "External": the VirtualMachineInstance is protected and status.evacuationNodeName is set;
	//   an external controller is expected to act on it.
	// Unset: the cluster-wide default (ConfigMap vmlet-system/vmlet-config, key
	// evictionStrategy), None when that is unset too.
	// +optional
	EvictionStrategy *EvictionStrategy `json:"evictionStrategy,omitempty"`

	// Grace period observed after signalling a VirtualMachineInstance to stop after which the
	// VirtualMachineInstance is force terminated.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds,omitempty"`

	// List of volumes that can be mounted by disks belonging to the vmi.
	// A volume without a disk of the same name gets a default disk (virtio bus), as KubeVirt's
	// defaulting does. Volume names are unique.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Volumes []Volume `json:"volumes,omitempty"`

	// Specifies the hostname of the vmi.
	// If not specified, the hostname will be set to the name of the vmi, if dhcp or cloud-init
	// is configured properly.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Hostname string `json:"hostname,omitempty"`

	// If specified, the fully qualified vmi hostname will be
	// "<hostname>.<subdomain>.<pod namespace>.svc.<cluster domain>".
	// If not specified, the vmi will not have a domainname at all. The DNS entry will resolve to
	// the vmi, no matter if the vmi itself can pick up a hostname.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Subdomain string `json:"subdomain,omitempty"`

	// List of networks that can be attached to a vm's virtual interface.
	// Every network must be used by exactly one interface of the same name. Only the pod
	// network is supported (Multus is not), so at most one network can be defined.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Networks []Network `json:"networks,omitempty"`

	// Paused is vmlet-specific (not part of kubevirt.io/v1): a declarative pause. While true the
	// guest's vCPUs are stopped (QMP "stop"); setting it back to false resumes them (QMP
	// "cont"). Unlike the rest of the spec it may change at any time. The Paused condition
	// reports the observed state. KubeVirt pauses through a subresource instead.
	// +optional
	Paused bool `json:"paused,omitempty"`
}
