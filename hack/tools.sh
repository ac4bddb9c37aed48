#!/usr/bin/env bash
# Installs the project's pinned Go tools from the Go module proxy into a cache outside the repo
# and links them into bin/. A rerun with the same versions costs ~0 s.
#
#   hack/tools.sh golangci-lint controller-gen
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/tools

# name -> module path@version (the pins)
declare -A pin=(
  [golangci-lint]=github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
  [protoc-gen-go]=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12-0.20260120151049-f2248ac996af
  [protoc-gen-go-grpc]=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
  [benchstat]=golang.org/x/perf/cmd/benchstat@v0.0.0-20260409210113-d2ed1e0ebc06
)

mkdir -p "$root/bin"
for name in "$@"; do
  spec=${pin[$name]:-}
  [ -n "$spec" ] || { echo "tools: unknown tool $name" >&2; exit 2; }
  dir="$cache/$name-${spec##*@}"
  if [ ! -x "$dir/$name" ]; then
    echo "tools: installing $spec (first time: a minute or two)..." >&2
    GOBIN="$dir" GOFLAGS= go install "$spec"
  fi
  ln -sfn "$dir/$name" "$root/bin/$name"
done
