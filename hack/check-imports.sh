#!/usr/bin/env bash
# Host packages (qemu, devices, network, storage, cpuweight, selinuxlabel, pki) and the launcher binary must not depend on
# Kubernetes: they take plain Go structs. This checks the full transitive dependency lists, which
# golangci-lint's depguard (direct imports only) cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
for p in ./qemu/... ./devices/... ./network/... ./storage/... ./cpuweight/... ./selinuxlabel/... ./pki/... ./cmd/vmlet-launcher/...; do
  list=$(go list -deps "$p")
  deps=$(grep -E '^(k8s\.io/|sigs\.k8s\.io/controller-runtime|github\.com/vmlet/vmlet/(api|controllers)(/|$))' <<<"$list" || true)
  if [ -n "$deps" ]; then
    echo "check-imports: $p depends on Kubernetes packages:" >&2
    echo "$deps" | sed 's/^/  /' >&2
    bad=1
  fi
done
# The translation is pure: CRD types in, plain values out. It reads no API server (client-go,
# controller-runtime) and sits below the reconcilers (no other package of controllers/).
deps=$(go list -deps ./controllers/translate/... | grep -E '^(k8s\.io/client-go|sigs\.k8s\.io/controller-runtime|github\.com/vmlet/vmlet/controllers)(/|$)' |
  grep -v '^github\.com/vmlet/vmlet/controllers/translate$' || true)
if [ -n "$deps" ]; then
  echo "check-imports: controllers/translate depends on:" >&2
  echo "$deps" | sed 's/^/  /' >&2
  bad=1
fi
[ $bad = 0 ] && echo "check-imports: host packages and vmlet-launcher are free of k8s.io; controllers/translate of API clients" >&2
exit $bad
