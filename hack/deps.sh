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

# QEMU must be at least this major version. Debian 12's own QEMU (7.2) loses guest writes in a
# live migration under TCG (its dirty tracking leaves TLB entries that write directly; fixed in
# 9.0) and aborts shortly after a TCG vCPU is unplugged; these machines have no usable KVM. So on
# bookworm QEMU comes from Debian's own bookworm-backports (10.0 today), pinned for QEMU's
# packages only: everything else stays bookworm's.
qemu_min_major=10
qemu_packages=(qemu-system-x86 qemu-system-common qemu-system-data qemu-utils qemu-block-extra
  qemu-system-gui 'qemu-system-modules-*' seabios)
backports_sources=/etc/apt/sources.list.d/vmlet-bookworm-backports.sources
backports_pin=/etc/apt/preferences.d/vmlet-qemu

qemu_major() {
  local v
  v=$(/usr/bin/qemu-system-x86_64 --version 2>/dev/null | sed -n 's/^QEMU emulator version \([0-9]*\)\..*/\1/p')
  echo "${v:-0}"
}

missing=()
for p in "${!probe[@]}"; do
  [ -e "${probe[$p]}" ] || missing+=("$p")
done
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
old_qemu=
# Only Debian 12 gets a newer QEMU than its own (from its backports); elsewhere apt's QEMU is
# what there is, and vmlet keeps the older QEMU's limits (see the warning below).
if [ "$codename" = bookworm ] && [ -e /usr/bin/qemu-system-x86_64 ] && [ "$(qemu_major)" -lt "$qemu_min_major" ]; then
  old_qemu=$(qemu_major)
  missing+=(qemu-system-x86 qemu-utils)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "deps: need root to install: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if [ "$codename" = bookworm ] && [ ! -s "$backports_pin" ]; then
  echo "deps: QEMU >= $qemu_min_major comes from bookworm-backports: adding $backports_sources and $backports_pin" >&2
  cat >"$backports_sources" <<'SRC'
# Added by vmlet's hack/deps.sh for QEMU >= 10 (pinned in /etc/apt/preferences.d/vmlet-qemu).
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  {
    echo "# Added by vmlet's hack/deps.sh: QEMU's packages from bookworm-backports, nothing else."
    echo "Package: ${qemu_packages[*]}"
    echo "Pin: release n=bookworm-backports"
    echo "Pin-Priority: 990"
  } >"$backports_pin"
fi
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ -n "$old_qemu" ]; then
  echo "deps: QEMU $old_qemu is installed; vmlet needs >= $qemu_min_major: upgrading" >&2
fi
echo "deps: installing ${missing[*]} with apt (about 30 s)..." >&2
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
if [ "$(qemu_major)" -lt "$qemu_min_major" ]; then
  if [ "$codename" = bookworm ]; then
    echo "deps: error: apt installed QEMU $(qemu_major) from bookworm-backports; vmlet needs >= $qemu_min_major there (see $backports_pin)" >&2
    exit 1
  fi
  echo "deps: warning: QEMU $(qemu_major) (< $qemu_min_major) on ${codename:-this system}: under TCG migrations through the API are stop-and-copy before 9.0 and vCPU unplug is refused before 10 (README: Live migration, CPU and memory hotplug)" >&2
fi
echo "deps: done ($(/usr/bin/qemu-system-x86_64 --version | head -1))" >&2
