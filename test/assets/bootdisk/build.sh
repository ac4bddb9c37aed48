#!/usr/bin/env bash
# Builds a BIOS-bootable disk of the vmlet test guest (test/assets/guest): an ext2 filesystem on
# the whole disk (no partition table) holding the guest's kernel and initramfs, with EXTLINUX
# (Debian's extlinux + syslinux-common, downloaded and unpacked, not installed) in its boot
# sector. It stands in for bootable containerDisks such as KubeVirt's cirros demo: the disk boots
# the test guest with `console=ttyS0 quiet panic=-1`. Output, cached outside the repo:
#
#   ${VMLET_CACHE:-$HOME/.cache/vmlet}/bootdisk/<key>/boot.qcow2
#
# key = hash of this script, the guest build and the extlinux package version. Progress goes to
# stderr; the output folder is the last line on stdout. Needs root (extlinux installs into a
# mounted filesystem: a loop mount); exit status 3 means a prerequisite is missing.
#
# Equivalent by hand: mkfs.ext2 disk.raw; mount -o loop disk.raw m; cp vmlinuz initramfs.gz
# ldlinux.c32 extlinux.conf m/; extlinux --install m; umount m; qemu-img convert -O qcow2.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "bootdisk: $*" >&2; }
die() { echo "bootdisk: error: $*" >&2; exit "${2:-1}"; }

disk_mib=64
packages=(extlinux syslinux-common)
cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/bootdisk
mkdir -p "$cache"

[ "$(id -u)" = 0 ] || die "needs root: extlinux installs into a loop-mounted filesystem" 3
for tool in apt-get apt-cache dpkg-deb mkfs.ext2 mount umount qemu-img flock sha256sum; do
  command -v "$tool" >/dev/null || die "$tool not found (make deps)" 3
done

guest=$(bash "$here/../guest/build.sh" | tail -n1)
versions=$(LC_ALL=C apt-cache policy "${packages[@]}" | awk '
  /^[^ ]/ {pkg=$1; sub(/:$/, "", pkg)}
  /^  Candidate:/ {if ($2 == "(none)") exit 1; print pkg "=" $2}') ||
  die "apt has no candidate for ${packages[*]} (apt-get update)" 3
key=$({ sha256sum "$here/build.sh"; echo "$guest"; echo "$versions"; } | sha256sum | cut -c1-16)
out="$cache/$key"
if [ -f "$out/boot.qcow2" ]; then
  touch "$out"
  echo "$out"
  exit 0
fi

exec 9>"$cache/.lock"
flock 9
if [ -f "$out/boot.qcow2" ]; then
  echo "$out"
  exit 0
fi
rm -rf "$cache"/.build-*
find "$cache" -mindepth 1 -maxdepth 1 -type d -mtime +30 -exec rm -rf {} + 2>/dev/null || true
tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
mnt=$tmp/mnt
cleanup() {
  mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
  rm -rf "$tmp"
}
trap cleanup EXIT
say "building $key from $guest"

mkdir -p "$tmp/debs" "$tmp/pkg" "$mnt" "$tmp/out"
mapfile -t specs <<<"$versions"
(cd "$tmp/debs" && apt-get -o APT::Sandbox::User=root -qq download "${specs[@]}" >&2)
for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/pkg"; done

truncate -s "${disk_mib}M" "$tmp/disk.raw"
mkfs.ext2 -F -q -L vmletboot "$tmp/disk.raw"
mount -o loop "$tmp/disk.raw" "$mnt"
cp "$guest/vmlinuz" "$guest/initramfs.gz" "$tmp/pkg/usr/lib/syslinux/modules/bios/ldlinux.c32" "$mnt/"
cat >"$mnt/extlinux.conf" <<'CONF'
DEFAULT vmlet
PROMPT 0
TIMEOUT 0
LABEL vmlet
  KERNEL /vmlinuz
  INITRD /initramfs.gz
  APPEND console=ttyS0 quiet panic=-1
CONF
"$tmp/pkg/usr/bin/extlinux" --install "$mnt" 2>/dev/null >&2
umount "$mnt"
qemu-img convert -q -f raw -O qcow2 "$tmp/disk.raw" "$tmp/out/boot.qcow2"
{
  echo "# vmlet test guest boot disk $key"
  echo "guest $guest"
  echo "$versions"
} >"$tmp/out/manifest.txt"
mv "$tmp/out" "$out"
say "built $out"
echo "$out"
