package v1alpha1

// Network represents a network type and a resource that should be connected to the vm.
type Network struct {
	// Network name.
	// Must be a DNS_LABEL and unique within the vm.
	// More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#names
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// NetworkSource represents the network type and the source interface that should be
	// connected to the virtual machine.
	NetworkSource `json:",inline"`
}

// NetworkSource represents the source resource that will be connected to the vm.
// Exactly one of its members must be specified; vmlet supports pod and multus (KubeVirt's
// resourceClaim is rejected).
//
// +kubebuilder:validation:XValidation:rule="(has(self.pod) ? 1 : 0) + (has(self.multus) ? 1 : 0) == 1",message="a network must have exactly one source: pod or multus"
type NetworkSource struct {
	// Pod connects the vm to the pod network of its launcher.
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`
	// Multus connects the vm to a secondary network: a second interface of the launcher's pod.
	// vmlet plugs interfaces of multus networks into the running guest (hotplug), also those
	// listed at creation. In local mode the node agent is the CNI and offers one secondary
	// network, "vmlet-node" (or "<namespace>/vmlet-node"): a second veth on the node bridge
	// with an address of the node subnet.
	// +optional
	Multus *MultusNetwork `json:"multus,omitempty"`
}

// MultusNetwork represents a secondary network of the pod, as Multus attaches it.
//
// +kubebuilder:validation:XValidation:rule="!self.?default.orValue(false)",message="default multus networks (replacing the pod network) are not supported by vmlet",fieldPath=".default"
type MultusNetwork struct {
	// References to a NetworkAttachmentDefinition CRD object. Format:
	// <networkName>, <namespace>/<networkName>. If namespace is not specified, VMI namespace is
	// assumed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/)?[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`
	NetworkName string `json:"networkName"`
	// Select the default network and add it to the multus-cni.io/default-network annotation.
	// Not supported by vmlet (must be false).
	// +optional
	Default bool `json:"default,omitempty"`
}

// PodNetwork represents the stock pod network interface.
type PodNetwork struct {
	// CIDR for vm network.
	// Default 10.0.2.0/24 if not specified.
	// +optional
	// +kubebuilder:validation:MaxLength=18
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 4 && cidr(self).prefixLength() <= 30",message="must be an IPv4 CIDR with a prefix length of at most 30"
	VMNetworkCIDR string `json:"vmNetworkCIDR,omitempty"`
	// IPv6 CIDR for the vm network.
	// Defaults to fd10:0:2::/120 if not specified.
	// +optional
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self).ip().family() == 6 && cidr(self).prefixLength() <= 126",message="must be an IPv6 CIDR with a prefix length of at most 126"
	VMIPv6NetworkCIDR string `json:"vmIPv6NetworkCIDR,omitempty"`
}
