// Package v1alpha1 holds the vmlet.dev/v1alpha1 API: VirtualMachineInstance (vmi) and
// VirtualMachineInstanceMigration (vmim), shaped like kubevirt.io/v1 (same field names, JSON
// tags and layout for what vmlet supports) so a KubeVirt manifest runs with only its apiVersion
// changed. It imports apimachinery only.
//
// # What differs from kubevirt.io/v1
//
//   - vmlet-only fields, marked as such in their docs: spec.paused (declarative pause) and
//     status.launcher (QEMU pid, launcher pod, accelerator and why, QEMU version).
//   - status.conditions are metav1.Condition, not KubeVirt's VirtualMachineInstanceCondition.
//     The wire names that clients read (type, status, reason, message, lastTransitionTime) are
//     the same, so `kubectl wait --for=condition=Ready` and JSONPath queries work unchanged;
//     metav1.Condition adds observedGeneration, drops lastProbeTime (KubeVirt leaves it null),
//     comes with meta.SetStatusCondition/FindStatusCondition, and the API server validates
//     reason and lastTransitionTime. Condition types keep KubeVirt's strings (Ready, Paused,
//     AgentConnected, LiveMigratable, Synchronized).
//   - Validation that KubeVirt does in its admission webhook is done here by the API server
//     itself (OpenAPI schema and CEL rules in the CRD); vmlet runs no webhook. Names of disks,
//     volumes, interfaces and networks are DNS-1123 labels (KubeVirt also allows "_" and
//     upper case in interface names).
//   - Defaults that KubeVirt's mutating webhook writes into the object are not written: they
//     are applied when the spec is read (defaults.go: EffectiveDisks, EffectiveNetworks): a
//     volume without a disk gets a virtio disk (a cdrom sata, a lun scsi), an interface without
//     a binding is bridge, and a spec without interfaces and networks gets the "default" pod
//     network unless autoattachPodInterface is false.
//
// # Unsupported and unknown fields
//
// A structural CRD schema makes the API server prune fields it does not know, silently when the
// client asks for no field validation. vmlet therefore:
//
//  1. declares every kubevirt.io/v1 field it does not implement (UnsupportedFields) in the CRD
//     schema with a rule that always fails: the API server answers 422 Invalid with a
//     FieldValueForbidden cause naming the field (e.g. spec.domain.clock), whatever field
//     validation the client chose. CEL cannot see undeclared fields, even under
//     x-kubernetes-preserve-unknown-fields, so an "allowed keys" rule is not possible;
//  2. for any other unknown field (typos, fields of newer KubeVirt versions) relies on
//     server-side field validation: with fieldValidation=Strict (kubectl's default since 1.27,
//     `kubectl create/apply --validate=strict`) the API server answers 400 BadRequest
//     `strict decoding error: unknown field "spec.domain.foo"`; with the default of other
//     clients (Warn) it prunes the field and returns a warning (TestUnknownFieldWithout-
//     StrictValidation shows both). vmlet's own clients must therefore send Strict
//     (controller-runtime: client.WithFieldValidation(c, metav1.FieldValidationStrict)).
//
// # Regenerating
//
// zz_generated.deepcopy.go and config/crd/bases come from `make generate` (hack/generate.sh:
// controller-gen as pinned in hack/tools.sh, then api/internal/crdpatch for the declarations
// above and maxLength on quantities); `make verify` fails when they are not up to date.
//
// +kubebuilder:object:generate=true
// +groupName=vmlet.dev
package v1alpha1
