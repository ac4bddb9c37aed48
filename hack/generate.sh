#!/usr/bin/env bash
# Regenerates everything derived from api/: deepcopy code and the CRD manifests.
#
#   hack/generate.sh            # from anywhere inside the repo
#
# controller-gen is pinned and run through `go run`, so the only prerequisite is Go and the
# module proxy (first run ≈1.5 min to download and build it, then ≈1 s).
set -euo pipefail

CONTROLLER_GEN_VERSION=v0.23.0
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

controller_gen() {
	go run "sigs.k8s.io/controller-tools/cmd/controller-gen@${CONTROLLER_GEN_VERSION}" "$@"
}

# 1. DeepCopy/DeepCopyObject methods: api/v1alpha1/zz_generated.deepcopy.go.
controller_gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

# 2. CRDs with OpenAPI schema, CEL rules, printer columns: config/crd/bases/.
#    maxDescLen is left unlimited so `kubectl explain` shows the full field docs.
rm -f config/crd/bases/*.yaml
controller_gen crd paths=./api/... output:crd:artifacts:config=config/crd/bases

# 3. Declare the kubevirt.io/v1 fields vmlet does not implement, so that the API server rejects
#    them with a clear message instead of pruning them (see api/v1alpha1/doc.go).
go run ./api/internal/crdpatch config/crd/bases/*.yaml
