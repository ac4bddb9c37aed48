// Package v1alpha1 holds the vmlet.dev/v1alpha1 API: VirtualMachineInstance and
// VirtualMachineInstanceMigration, shaped like kubevirt.io/v1 (same field names and layout for
// what vmlet supports) so a KubeVirt manifest runs with only its apiVersion changed.
// It imports apimachinery only.
//
// +kubebuilder:object:generate=true
// +groupName=vmlet.dev
package v1alpha1
