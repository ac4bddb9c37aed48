// Package v1alpha1 holds the migrations.vmlet.dev/v1alpha1 API: MigrationPolicy, shaped like
// KubeVirt's migrations.kubevirt.io/v1alpha1 (same field names, JSON tags and layout), so a
// KubeVirt policy runs with only its apiVersion changed. A policy is cluster-scoped; it selects
// vmis by their labels and their namespace's labels, and the fields it sets override the
// cluster's migration configuration (ConfigMap vmlet-system/vmlet-config, key migrations) for
// the migrations of the vmis it matches. The matching and the overlay are in
// controllers/migration (policy.go). It imports apimachinery and api/v1alpha1 only.
//
// # What differs from migrations.kubevirt.io/v1alpha1
//
//   - spec.maxDowntimeMs and spec.experimental are declared in the CRD with a rule that always
//     fails (UnsupportedFields, the way api/v1alpha1 rejects the kubevirt.io/v1 fields vmlet does
//     not implement): vmlet's cluster configuration has no downtime limit nor KubeVirt's
//     experimental stall detector / downtime tuning / compression, so a policy setting them is
//     refused by name instead of being silently pruned.
//   - spec.selectors is required (KubeVirt's Go type has no omitempty either; a policy without
//     selectors matches nothing there).
//
// +kubebuilder:object:generate=true
// +groupName=migrations.vmlet.dev
package v1alpha1
