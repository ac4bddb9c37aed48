#!/usr/bin/env bash
# Regenerates the Go code of the launcher API from qemu/launcher/api/v1/launcher.proto.
# Generators are pinned: protoc from Debian's protobuf-compiler (installed with apt when
# missing), protoc-gen-go and protoc-gen-go-grpc from hack/tools.sh. The generated files are
# committed; `make verify` (run by .ci/run) reruns this and fails on a diff.
#
#   hack/genproto.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

want_protoc="libprotoc 3.21.12" # Debian 12 protobuf-compiler
if ! command -v protoc >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "genproto: protoc missing; run as root or: sudo apt-get install protobuf-compiler" >&2
    exit 1
  fi
  echo "genproto: installing protobuf-compiler with apt..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends protobuf-compiler >&2
fi
have=$(protoc --version)
if [ "$have" != "$want_protoc" ]; then
  echo "genproto: warning: protoc is '$have', generated headers were made with '$want_protoc'" >&2
fi

hack/tools.sh protoc-gen-go protoc-gen-go-grpc
PATH="$root/bin:$PATH" protoc \
  --proto_path=. \
  --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  qemu/launcher/api/v1/launcher.proto
gofmt -l qemu/launcher/api/v1 | (! grep .) || { echo "genproto: generated code not gofmt-clean" >&2; exit 1; }
echo "genproto: qemu/launcher/api/v1 regenerated" >&2
