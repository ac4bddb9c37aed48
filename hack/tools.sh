#!/usr/bin/env bash
# The one place where the project's Go tools are pinned. Installs them from the Go module proxy
# into a cache outside the repo and links them into bin/. A rerun with the same versions costs
# ~0 s. Everything that runs a tool goes through here (Makefile, hack/generate.sh,
# hack/genproto.sh); nothing else names a tool version.
#
#   hack/tools.sh golangci-lint controller-gen     # install + link into bin/
#   hack/tools.sh --version protoc-gen-go          # print the pinned version
#
# protoc itself is Debian's protobuf-compiler (apt, hack/genproto.sh checks its version).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/tools
export PATH=/usr/local/go/bin:$PATH

# name -> package@version (the pins). @go.mod: the version go.mod requires of the tool's
# module, so that go.mod is its one pin (protoc-gen-go must match the protobuf runtime that the
# generated code links).
declare -A pin=(
  [golangci-lint]=github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
  [controller-gen]=sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0
  [protoc-gen-go]=google.golang.org/protobuf/cmd/protoc-gen-go@go.mod
  [protoc-gen-go-grpc]=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
)

# spec NAME prints package@version with @go.mod resolved.
spec() {
  local s=${pin[$1]:-}
  [ -n "$s" ] || { echo "tools: unknown tool $1 (known: ${!pin[*]})" >&2; exit 2; }
  if [ "${s##*@}" = go.mod ]; then
    local pkg=${s%@*} v
    v=$(cd "$root" && go list -f '{{.Module.Version}}' "$pkg") || {
      echo "tools: $pkg is not in go.mod" >&2; exit 2; }
    s=$pkg@$v
  fi
  echo "$s"
}

if [ "${1:-}" = --version ]; then
  shift
  for name in "$@"; do s=$(spec "$name"); echo "${s##*@}"; done
  exit 0
fi

mkdir -p "$root/bin"
for name in "$@"; do
  s=$(spec "$name")
  dir="$cache/$name-${s##*@}"
  if [ ! -x "$dir/$name" ]; then
    echo "tools: installing $s (first time: a minute or two)..." >&2
    GOBIN="$dir" GOFLAGS= go install "$s"
  fi
  ln -sfn "$dir/$name" "$root/bin/$name"
done
