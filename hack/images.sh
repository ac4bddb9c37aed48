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
# With --out DIR it builds into DIR whatever the cache holds (TestImages rebuilds this way to
# compare digests); the downloaded packages are still shared.
#
# Equivalent by hand: CGO_ENABLED=0 go build -trimpath ./cmd/...; apt-get download the QEMU
# packages; dpkg-deb -x each; then a Dockerfile FROM scratch with COPY of the files in
# internal/imagebuild/qemu-files.txt, docker build, skopeo copy to oci-archive.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
say() { echo "images: $*" >&2; }
# summary prints images.txt readably on stderr: reference, digest, sizes.
summary() {
  awk '{printf "images: %-29s %s  %6.1f MB compressed  %6.1f MB uncompressed\n", $2, $3, $4 / 1e6, $5 / 1e6}' "$1" >&2
}
die() { echo "images: error: $*" >&2; exit "${2:-1}"; }

command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found" 3
force_out=
if [ "${1:-}" = --out ]; then
  [ -n "${2:-}" ] || die "--out needs a folder"
  mkdir -p "$2"
  force_out=$(cd "$2" && pwd)
fi
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/images
mkdir -p "$cache"

list=internal/imagebuild/qemu-files.txt
# QEMU's files come from these packages, which must be in the dependency closure of what Debian
# installs for QEMU: a list that names anything else is wrong.
roots=(qemu-system-x86 qemu-utils)
for tool in apt-get apt-cache dpkg-deb flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found: the images are built from Debian packages" 3
done
mapfile -t listed < <(awk '!/^#/ && NF == 3 {print $2}' "$list" | sort -u)
((${#listed[@]})) || die "$list names no package"
# Besides QEMU's: the CA certificates the agent trusts when it pulls containerDisks over HTTPS.
extra=(ca-certificates)
packages=("${listed[@]}" "${extra[@]}")

# --- resolve package versions (cached per state of the apt lists: apt-cache takes ~1 s) ---------
resolve() {
  local closure missing=()
  closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${roots[@]}" 2>/dev/null | grep -v '^ ' | sort -u) || return 1
  for p in "${listed[@]}"; do
    grep -qx "$p" <<<"$closure" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "images: error: $list names packages outside the dependency closure of ${roots[*]}: ${missing[*]}" >&2
    return 2
  fi
  LC_ALL=C apt-cache policy "${packages[@]}" | awk '
    /^[^ ]/ {pkg=$1; sub(/:$/, "", pkg)}
    /^  Candidate:/ {if ($2 == "(none)") exit 1; print pkg "=" $2}'
}
lists_sig=$({ cat "$list"; echo "${extra[*]}"; stat -c '%n %s %Y' /var/lib/apt/lists/* 2>/dev/null; } | sha256sum | cut -c1-16)
resolved_file="$cache/resolved-$lists_sig"
if [ -s "$resolved_file" ]; then
  resolved=$(cat "$resolved_file")
else
  rc=0
  resolved=$(resolve) || rc=$?
  [ "$rc" = 2 ] && exit 1
  if [ "$rc" != 0 ] || [ "$(wc -l <<<"$resolved")" != "${#packages[@]}" ]; then
    [ "$(id -u)" = 0 ] || die "cannot resolve ${packages[*]} (run apt-get update as root)" 3
    say "apt lists lack the packages: apt-get update"
    apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
    resolved=$(resolve) || die "cannot resolve the QEMU packages after apt-get update"
    lists_sig=$({ cat "$list"; echo "${extra[*]}"; stat -c '%n %s %Y' /var/lib/apt/lists/* 2>/dev/null; } | sha256sum | cut -c1-16)
    resolved_file="$cache/resolved-$lists_sig"
  fi
  printf '%s\n' "$resolved" >"$resolved_file.$$" && mv "$resolved_file.$$" "$resolved_file"
fi

# --- key --------------------------------------------------------------------------------------
sources_hash() {
  if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then # a source tarball, not a checkout
    find . -path ./bin -prune -o -type f \( -name '*.go' ! -name '*_test.go' -o -name go.mod -o -name go.sum \
      -o -path ./internal/imagebuild/qemu-files.txt -o -path ./hack/images.sh \) -print0 |
      sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
    return
  fi
  git ls-files -z -co --exclude-standard -- '*.go' ':!*_test.go' go.mod go.sum internal/imagebuild/qemu-files.txt hack/images.sh |
    sort -z | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
    xargs -0 sha256sum | sha256sum | cut -c1-16
}
key=$({
  sources_hash
  go env GOVERSION
  echo "SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-}"
  echo "$resolved"
} | sha256sum | cut -c1-16)
out="$cache/$key"
[ -n "$force_out" ] && out=$force_out
if [ -z "$force_out" ] && [ -f "$out/images.txt" ]; then
  touch "$out"
  summary "$out/images.txt"
  echo "$out"
  exit 0
fi

# --- build (one builder at a time) --------------------------------------------------------------
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "waiting for another build (lock $cache/.lock)"
  flock 9
fi
if [ -z "$force_out" ] && [ -f "$out/images.txt" ]; then
  summary "$out/images.txt"
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
  go build -tags grpcnotrace -trimpath -buildvcs=false -ldflags='-s -w -buildid=' -o "$tmp/bin/" \
  ./cmd/vmlet ./cmd/vmctl ./cmd/vmlet-launcher ./cmd/vmlet-pause >&2
go build -o "$tmp/imagebuild" ./hack/imagebuild

# Debian packages: downloaded once into $cache/../debs (kept across builds), unpacked here.
debs=$(dirname "$cache")/debs
mkdir -p "$debs" "$tmp/root"
mapfile -t specs <<<"$resolved"
need=()
for spec in "${specs[@]}"; do
  pkg=${spec%%=*} ver=${spec#*=}
  compgen -G "$debs/${pkg}_${ver//:/%3a}_*.deb" >/dev/null || need+=("$spec")
done
if ((${#need[@]})); then
  say "apt-get download ${#need[@]} of ${#specs[@]} packages into $debs"
  apt_opts=()
  [ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root)
  (cd "$debs" && apt-get "${apt_opts[@]}" -qq download "${need[@]}" >&2)
fi
say "unpacking ${#specs[@]} packages"
for spec in "${specs[@]}"; do
  pkg=${spec%%=*} ver=${spec#*=}
  deb=$(compgen -G "$debs/${pkg}_${ver//:/%3a}_*.deb" | head -n1)
  [ -n "$deb" ] || die "$pkg $ver was not downloaded"
  dpkg-deb -x "$deb" "$tmp/root"
done

"$tmp/imagebuild" --out "$tmp/out" --bin "$tmp/bin" --root "$tmp/root" --qemu-files "$list" >"$tmp/out/images.txt"
if [ -n "$force_out" ]; then
  mv "$tmp"/out/* "$out"/
else
  rm -rf "$out"
  mv "$tmp/out" "$out"
fi
# Image folders unused for 30 days go (only <key> folders: local-images.sh keeps others here).
find "$cache" -mindepth 1 -maxdepth 1 -type d -regex '.*/[0-9a-f]\{16\}' -mtime +30 \
  -exec rm -rf {} + 2>/dev/null || true
say "built in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s:"
summary "$out/images.txt"
echo "$out"
