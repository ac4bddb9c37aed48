#!/usr/bin/env bash
# Builds vmlet's OCI images without a container engine (internal/imagebuild, hack/imagebuild)
# into a cache folder outside the repo and prints that folder on stdout (progress on stderr):
#
#   ${VMLET_CACHE:-$HOME/.cache/vmlet}/images/<key>/{pause,vmlet,vmlet-launcher}.tar, images.txt
#
# Each .tar is an OCI archive for `ctr -n k8s.io images import FILE`, named vmlet.dev/pause:dev,
# vmlet.dev/vmlet:dev and vmlet.dev/vmlet-launcher:dev; images.txt has one line per image: file,
# reference, manifest digest, compressed and uncompressed bytes.
#
# key = hash of the module's Go sources, go.mod/go.sum, internal/imagebuild's data, this script,
# the Go version, SOURCE_DATE_EPOCH and the Debian package versions, so a rerun with nothing
# changed costs well under a second. Builds serialise on a flock and happen in a temp folder
# renamed into place. The images are reproducible: the same key gives the same digests.
#
# Equivalent by hand: CGO_ENABLED=0 go build -trimpath ./cmd/...; apt-get download the QEMU
# packages; dpkg-deb -x each; then a Dockerfile FROM scratch with COPY of the files in
# internal/imagebuild/qemu-files.txt, docker build, skopeo copy to oci-archive.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
say() { echo "images: $*" >&2; }
die() { echo "images: error: $*" >&2; exit "${2:-1}"; }

command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found" 3
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/images
mkdir -p "$cache"

# --- key --------------------------------------------------------------------------------------
sources_hash() {
  git ls-files -z -co --exclude-standard -- '*.go' go.mod go.sum internal/imagebuild hack/images.sh |
    sort -z | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 sha256sum | sha256sum | cut -c1-16
}
key=$({
  sources_hash
  go env GOVERSION
  echo "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-}"
} | sha256sum | cut -c1-16)
out="$cache/$key"
if [ -f "$out/images.txt" ]; then
  touch "$out"
  cat "$out/images.txt" >&2
  echo "$out"
  exit 0
fi

# --- build (one builder at a time) --------------------------------------------------------------
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "waiting for another build (lock $cache/.lock)"
  flock 9
fi
if [ -f "$out/images.txt" ]; then
  cat "$out/images.txt" >&2
  echo "$out"
  exit 0
fi
rm -rf "$cache"/.build-*
tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s.%N)
say "building $key in $tmp"

say "go build vmlet vmctl vmlet-launcher vmlet-pause ($(go env GOVERSION), CGO_ENABLED=0)"
mkdir -p "$tmp/bin" "$tmp/out"
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOWORK=off GOFLAGS=-mod=readonly \
  go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$tmp/bin/" \
  ./cmd/vmlet ./cmd/vmctl ./cmd/vmlet-launcher ./cmd/vmlet-pause >&2
go build -o "$tmp/imagebuild" ./hack/imagebuild

"$tmp/imagebuild" --out "$tmp/out" --bin "$tmp/bin" >"$tmp/out/images.txt"
rm -rf "$out"
mv "$tmp/out" "$out"
# Image folders unused for 30 days go (only <key> folders: local-images.sh keeps others here).
find "$cache" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9a-f]\{16\}' -mtime +30 \
  -exec rm -rf {} + 2>/dev/null || true
say "built in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s:"
cat "$out/images.txt" >&2
echo "$out"
