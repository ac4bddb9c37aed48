package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MigrationPolicy holds migration configuration to apply to the migrations of a group of vmis:
// those whose labels, and whose namespace's labels, carry all of its selectors' labels. When
// several match, the one with the most matching labels wins (then the one with more vmi-label
// matches, then the first name in lexicographic order). Its set fields override the cluster's
// migration configuration; the name of the policy applied is recorded in the vmi's
// status.migrationState.migrationPolicyName.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=all
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type MigrationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec selects vmis and says what their migrations use.
	Spec MigrationPolicySpec `json:"spec"`
	// Status is empty (as KubeVirt's).
	// +optional
	// +nullable
	Status MigrationPolicyStatus `json:"status,omitempty"`
}

// MigrationPolicySpec selects vmis and overrides the cluster's migration configuration for
// them. An unset field keeps the cluster's value.
type MigrationPolicySpec struct {
	// Selectors say which vmis the policy applies to.
	Selectors *Selectors `json:"selectors"`

	// AllowAutoConverge lets QEMU throttle the guest's vCPUs when it dirties memory faster
	// than the link carries. Refused under TCG (the migration fails).
	// +optional
	AllowAutoConverge *bool `json:"allowAutoConverge,omitempty"`
	// BandwidthPerMigration limits each migration's bandwidth (bytes per second); 0 means
	// unlimited.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('0')) >= 0",message="bandwidthPerMigration must not be negative"
	BandwidthPerMigration *resource.Quantity `json:"bandwidthPerMigration,omitempty"`
	// CompletionTimeoutPerGiB is how many seconds a migration may take per GiB of guest memory
	// and copied disks before it is aborted (or switched to post-copy, or the guest paused,
	// when allowed).
	// +optional
	// +kubebuilder:validation:Minimum=1
	CompletionTimeoutPerGiB *int64 `json:"completionTimeoutPerGiB,omitempty"`
	// AllowPostCopy lets a migration that would time out switch to post-copy. Towards a node
	// whose QEMU may not use userfaultfd (label vmlet.dev/postcopy is not "true") it is turned
	// off for that migration, with a PostCopyUnavailable event. When the policy sets it and
	// not allowWorkloadDisruption, allowWorkloadDisruption follows it (as KubeVirt does).
	// +optional
	AllowPostCopy *bool `json:"allowPostCopy,omitempty"`
	// AllowWorkloadDisruption lets a migration that would time out pause the guest to finish.
	// +optional
	AllowWorkloadDisruption *bool `json:"allowWorkloadDisruption,omitempty"`
}

// LabelSelector is a set of labels that must all be present with these values (KubeVirt's
// migrations LabelSelector: a plain map, no expressions).
type LabelSelector map[string]string

// Selectors say which vmis a policy applies to: all the labels of both selectors must match.
// Empty selectors match every vmi.
type Selectors struct {
	// NamespaceSelector are labels the vmi's namespace must carry.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NamespaceSelector LabelSelector `json:"namespaceSelector,omitempty"`
	// VirtualMachineInstanceSelector are labels the vmi must carry.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	VirtualMachineInstanceSelector LabelSelector `json:"virtualMachineInstanceSelector,omitempty"`
}

// MigrationPolicyStatus is empty, as KubeVirt's.
type MigrationPolicyStatus struct{}

// MigrationPolicyList is a list of MigrationPolicies.
//
// +kubebuilder:object:root=true
type MigrationPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MigrationPolicy `json:"items"`
}
