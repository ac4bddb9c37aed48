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
// Exactly one of its members must be specified; vmlet supports only the pod network
// (KubeVirt's multus and resourceClaim are rejected).
//
// +kubebuilder:validation:XValidation:rule="has(self.pod)",message="a network must have exactly one source; vmlet supports only pod"
type NetworkSource struct {
	// Pod connects the vm to the pod network of its launcher.
	// +optional
	Pod *PodNetwork `json:"pod,omitempty"`
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
