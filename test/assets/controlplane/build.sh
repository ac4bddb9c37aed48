#!/usr/bin/env bash
# Builds the control-plane binaries the tests and local mode run, from the Go module proxy only,
# into a cache folder outside the repo keyed by this module's content. A rerun costs ~0 s.
#
#   test/assets/controlplane/build.sh            # prints the asset folder on stdout
#   BINARIES="kube-apiserver kubectl etcd kubelet" test/assets/controlplane/build.sh
#
# To add a binary: add its package to tools.go and a line to the table below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
k8s_version=v1.37.2

# name -> Go package. Extend this table (and tools.go) for kubelet, kube-scheduler, ...
declare -A pkg=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
  [kube-proxy]=k8s.io/kubernetes/cmd/kube-proxy
)
binaries=${BINARIES:-kube-apiserver kubectl etcd}

key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}
out="$cache/controlplane/$k8s_version-$key"
mkdir -p "$out"

major=${k8s_version#v}; major=${major%%.*}
minor=${k8s_version#v*.}; minor=${minor%%.*}
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

for b in $binaries; do
  [ -n "${pkg[$b]:-}" ] || { echo "controlplane: unknown binary $b" >&2; exit 2; }
  if [ -x "$out/$b" ]; then continue; fi
  echo "controlplane: building $b ($k8s_version) into $out (cold: several minutes)..." >&2
  start=$(date +%s)
  # Progress every 30 s so a long cold build never looks hung.
  ( while sleep 30; do echo "controlplane: ... still building $b ($(( $(date +%s) - start )) s)" >&2; done ) &
  ticker=$!
  if ! (cd "$here" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$b.tmp" "${pkg[$b]}"); then
    kill "$ticker" 2>/dev/null || true
    echo "controlplane: build of $b failed" >&2; exit 1
  fi
  kill "$ticker" 2>/dev/null || true
  mv "$out/$b.tmp" "$out/$b"
  echo "controlplane: built $b in $(( $(date +%s) - start )) s" >&2
done
echo "$out"
