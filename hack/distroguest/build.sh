#!/usr/bin/env bash
# Builds a real distribution guest for benchmarks: Debian 12 (bookworm) with systemd, udev,
# cloud-init (NoCloud seed inside the image), openssh-server and the distribution kernel
# (linux-image-amd64 with its initramfs-tools initrd), as a raw ext4 root filesystem for
# root=/dev/vda. A serial getty comes from systemd's serial-getty generator when the kernel
# command line says console=ttyS0. Boot it with a throwaway qcow2 overlay, so that every boot is
# a first boot (cloud-init does its whole first-boot work each time):
#
#   qemu-system-x86_64 -kernel DIR/vmlinuz -initrd DIR/initrd.img \
#     -append 'root=/dev/vda rw console=ttyS0' -drive file=OVERLAY.qcow2,if=virtio ...
#
# Packages come with mmdebstrap (installed with apt when missing) from the apt sources this
# machine already uses (/etc/apt/sources.list.d/debian.sources, else deb.debian.org). Nothing is
# mounted on the host; the image is made by `mkfs.ext4 -d`. The result is cached in
# $VMLET_CACHE/distroguest/KEY (default ~/.cache/vmlet), keyed by the recipe (suite, packages,
# hooks): a rerun costs nothing. Prints the folder (vmlinuz, initrd.img, root.raw, and
# packages.txt: the versions the mirror gave) on stdout; progress on stderr. ≈3–6 min and ≈150 MB of downloads the first time. Exits 2 when the mirror
# cannot be reached (so callers can skip with a message), 1 on any other failure.
#
#   bash hack/distroguest/build.sh
set -euo pipefail
cache=${VMLET_CACHE:-$HOME/.cache/vmlet}/distroguest

# The recipe: the suite, the packages and mmdebstrap's customize hooks (the cache key).
suite=bookworm
pkgs=systemd-sysv,udev,dbus,cloud-init,openssh-server,linux-image-amd64,initramfs-tools,ifupdown,isc-dhcp-client,netbase,iproute2,procps,sudo,less
# shellcheck disable=SC2016 # the hooks' $1 is mmdebstrap's (the root), not ours
hooks=(
  'echo distroguest > "$1/etc/hostname"'
  'printf "/dev/vda / ext4 rw,relatime 0 1\n" > "$1/etc/fstab"'
  'printf "auto lo\niface lo inet loopback\n" > "$1/etc/network/interfaces"'
  'printf "datasource_list: [ NoCloud, None ]\n" > "$1/etc/cloud/cloud.cfg.d/90_distroguest.cfg"'
  'mkdir -p "$1/var/lib/cloud/seed/nocloud" && printf "instance-id: distroguest\nlocal-hostname: distroguest\n" > "$1/var/lib/cloud/seed/nocloud/meta-data" && printf "#cloud-config\nusers:\n  - name: debian\n    sudo: ALL=(ALL) NOPASSWD:ALL\n    lock_passwd: true\n" > "$1/var/lib/cloud/seed/nocloud/user-data"'
  'chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" > "$1/../packages.txt"'
  'rm -f "$1"/etc/ssh/ssh_host_*'
)
key=$(printf '%s\n' "$suite" "$pkgs" "${hooks[@]}" "ext4 3G" | sha256sum | cut -c1-16)
out=$cache/$key
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -f "$out/done" ]; then
  echo "$out"
  exit 0
fi
log() { echo "distroguest: $*" >&2; }

if ! command -v mmdebstrap >/dev/null || ! command -v mkfs.ext4 >/dev/null; then
  log "installing mmdebstrap and e2fsprogs with apt..."
  apt-get install -y -qq mmdebstrap e2fsprogs >&2 || { apt-get update -qq >&2 && apt-get install -y -qq mmdebstrap e2fsprogs >&2; }
fi
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=http://deb.debian.org/debian
# The mirror probe: fetch one small package the way apt is set up here (proxy included).
probe=$(mktemp -d)
if ! (cd "$probe" && { timeout 60 apt-get download -qq base-files >/dev/null 2>&1 ||
  { timeout 120 apt-get update -qq >/dev/null 2>&1 && timeout 60 apt-get download -qq base-files >/dev/null 2>&1; }; }); then
  rm -rf "$probe"
  log "the apt mirror in $sources is not reachable (apt-get download base-files failed): cannot build the Debian guest"
  exit 2
fi
rm -rf "$probe"

tmp=$(mktemp -d "$cache/.build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
log "mmdebstrap $suite ($pkgs) from $sources (progress below)..."
start=$(date +%s)
hookargs=()
for h in "${hooks[@]}"; do hookargs+=(--customize-hook="$h"); done
mmdebstrap --variant=minbase --include="$pkgs" "${hookargs[@]}" "$suite" "$root" "$sources" >&2 ||
  { log "mmdebstrap failed"; exit 1; }
log "mmdebstrap took $(( $(date +%s) - start )) s"

kernel=$(find "$root/boot" -name 'vmlinuz-*' | sort | tail -1)
initrd=$(find "$root/boot" -name 'initrd.img-*' | sort | tail -1)
[ -n "$kernel" ] && [ -n "$initrd" ] || { log "no kernel or initrd in /boot"; exit 1; }
mkdir -p "$tmp/out"
cp "$kernel" "$tmp/out/vmlinuz"
cp "$initrd" "$tmp/out/initrd.img"
mv "$tmp/packages.txt" "$tmp/out/packages.txt"
log "root filesystem: $(du -sh "$root" | cut -f1); making root.raw (ext4, 3 GiB sparse)..."
mkfs.ext4 -q -F -L root -d "$root" "$tmp/out/root.raw" 3G >&2 # "ext4 3G" is in the key
printf 'kernel %s\ninitrd %s\ncmdline root=/dev/vda rw console=ttyS0\n' "$(basename "$kernel")" "$(basename "$initrd")" > "$tmp/out/done"
rm -rf "$out"
mv "$tmp/out" "$out"
log "done: $out ($(du -sh --apparent-size "$out/root.raw" | cut -f1) sparse, $(du -sh "$out/root.raw" | cut -f1) used)"
echo "$out"
