#!/usr/bin/env bash
# Regenerates everything derived from api/ and the RBAC markers: deepcopy code, the CRD
# manifests and the cluster controller's ClusterRole.
#
#   hack/generate.sh            # from anywhere inside the repo
#
# controller-gen is installed by hack/tools.sh (its one pin), so the only prerequisite is Go and
# the module proxy (first run ≈1.5 min to download and build it, then ≈1 s).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH=/usr/local/go/bin:$PATH

hack/tools.sh controller-gen
controller_gen() {
	"$root/bin/controller-gen" "$@"
}

# 1. DeepCopy/DeepCopyObject methods: api/v1alpha1/zz_generated.deepcopy.go.
controller_gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

# 2. CRDs with OpenAPI schema, CEL rules, printer columns: config/crd/bases/.
#    maxDescLen is left unlimited so `kubectl explain` shows the full field docs.
#    Built in a scratch folder so that a failure leaves the committed CRDs alone.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
controller_gen crd paths=./api/... output:crd:artifacts:config="$tmp"

# 3. Declare the kubevirt.io/v1 fields vmlet does not implement, so that the API server rejects
#    them with a clear message instead of pruning them, and bound quantities' length for the
#    CEL cost estimate (see api/v1alpha1/doc.go and api/internal/crdpatch).
go run ./api/internal/crdpatch "$tmp"/*.yaml

rm -f config/crd/bases/*.yaml
mkdir -p config/crd/bases
cp "$tmp"/*.yaml config/crd/bases/

# 4. The cluster controller's ClusterRole from the +kubebuilder:rbac markers of
#    controllers/cluster, migration and evacuation: config/rbac/role.yaml.
controller_gen rbac:roleName=vmlet-controller paths="{./controllers/cluster/...,./controllers/migration/...,./controllers/evacuation/...}" output:rbac:artifacts:config=config/rbac
