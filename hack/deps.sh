#!/usr/bin/env bash
# Installs the host packages vmlet's tests and local mode need, via apt, only when missing.
# Idempotent: a rerun on a provisioned machine costs well under a second.
set -euo pipefail

# package -> a command or file that proves it is installed
declare -A probe=(
  [qemu-system-x86]=/usr/bin/qemu-system-x86_64
  [qemu-utils]=/usr/bin/qemu-img
  [iproute2]=/usr/sbin/ip
  [util-linux]=/usr/sbin/losetup
  [socat]=/usr/bin/socat
  [genisoimage]=/usr/bin/isoinfo
  [strace]=/usr/bin/strace # internal/imagebuild TestQEMUFiles measures what QEMU opens
  # test/realcluster, make cluster-up: a real kubelet's runtime and pod network
  [containerd]=/usr/bin/containerd
  [runc]=/usr/sbin/runc
  [containernetworking-plugins]=/usr/lib/cni/bridge
)

missing=()
for p in "${!probe[@]}"; do
  [ -e "${probe[$p]}" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "deps: need root to install: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "deps: installing ${missing[*]} with apt (about 15 s)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
echo "deps: done" >&2
