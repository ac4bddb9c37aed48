package v1alpha1

import vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"

// UnsupportedMessage is the message of the validation error for an unsupported field.
const UnsupportedMessage = "not supported by vmlet (a migrations.kubevirt.io/v1alpha1 field vmlet does not implement): remove it"

// UnsupportedFields lists the migrations.kubevirt.io/v1alpha1 MigrationPolicy fields (KubeVirt
// commit d923fdb815cd) that vmlet rejects: hack/generate.sh declares each in the CRD with a rule
// that always fails (see api/v1alpha1.UnsupportedField), so the API server answers 422 naming
// the field instead of pruning it.
var UnsupportedFields = []vmletv1.UnsupportedField{
	// The cluster configuration has no downtime limit: QEMU's default (300 ms) is used.
	{Parent: "spec", Name: "maxDowntimeMs", Kind: vmletv1.KindInteger},
	// KubeVirt's alpha stall detector, downtime tuning and compression.
	{Parent: "spec", Name: "experimental", Kind: vmletv1.KindObject},
}
