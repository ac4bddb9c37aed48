// Command crdpatch post-processes the CRDs that controller-gen writes to config/crd/bases, for
// what controller-gen markers cannot express:
//
//   - every kubevirt.io/v1 field listed in v1alpha1.UnsupportedFields is declared in the
//     VirtualMachineInstance schema with a validation rule that always fails, so the API server
//     rejects it by name instead of pruning it; likewise the migrations.kubevirt.io fields of
//     migrationsv1alpha1.UnsupportedFields in the MigrationPolicy schema;
//   - every quantity (x-kubernetes-int-or-string) node gets a maxLength, which bounds the
//     estimated cost of the CEL rules that parse quantities.
//
// It rewrites the files in place and is idempotent. hack/generate.sh runs it:
//
//	go run ./api/internal/crdpatch config/crd/bases/*.yaml
package main
