#!/usr/bin/env bash
# Installs what only `make bench` needs (not `make test`): the libvirt daemons and clients that
# bench/sidebyside compares vmlet with. Without systemd: libvirt-daemon-system pulls systemd,
# so the sysv flavour and --no-install-recommends (see shared notes). No daemon is started or
# enabled here; bench/sidebyside starts its own and stops them. Idempotent.
set -euo pipefail

declare -A probe=(
  [libvirt-daemon]=/usr/sbin/libvirtd
  [libvirt-daemon-driver-qemu]=/usr/lib/x86_64-linux-gnu/libvirt/connection-driver/libvirt_driver_qemu.so
  [libvirt-clients]=/usr/bin/virsh
  [libvirt-daemon-system-sysv]=/etc/init.d/libvirtd
)
missing=()
for p in "${!probe[@]}"; do
  [ -e "${probe[$p]}" ] || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "bench-deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "bench-deps: installing ${missing[*]} with apt (about 10 s)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
# policy-rc.d 101: the packages' init scripts must not start a system libvirtd.
rc=/usr/sbin/policy-rc.d
made_rc=0
if [ ! -e "$rc" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$rc" && chmod 755 "$rc" && made_rc=1
fi
trap '[ $made_rc = 1 ] && rm -f "$rc"' EXIT
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
echo "bench-deps: done" >&2
