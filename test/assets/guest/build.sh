#!/usr/bin/env bash
# Builds the vmlet test guest from Debian packages only (nothing is installed into the host's /
# except the apt packages qemu-utils/gzip when missing) into a cache folder outside the repo:
#
#   ${VMLET_CACHE:-$HOME/.cache/vmlet}/guest/<key>/{vmlinuz,initramfs.gz,data.qcow2,manifest.txt}
#
# key = hash of this folder's builder files, the DHCPv6 client's sources, the module's go.mod and
# the Go version + the resolved package versions (kernel included), so a rerun costs ~0 s. Progress goes to stderr; the output folder is the last line on stdout.
# Concurrent callers serialise on a flock; the build happens in a temp dir renamed into place.
# Exit status 3 means a host tool is missing and cannot be installed (not root).
#
# Equivalent by hand: apt-get download linux-image-<ver>-cloud-amd64 busybox-static
# qemu-guest-agent <libs>; dpkg-deb -x each; CGO_ENABLED=0 go build ./test/assets/guest/dhcp6c (the
# DHCPv6 client); copy busybox, qemu-ga + libs, the client, modules and ./init into a tree; (cd tree && find . | busybox cpio -o -H newc) | gzip; qemu-img create -f qcow2 data 64M.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "guest: $*" >&2; }
die() { echo "guest: error: $*" >&2; exit "${2:-1}"; }

# Builder inputs: everything in this folder (init, scripts, module list, this script).
builder_files=(build.sh init modules.txt udhcpc.script acpi-powerdown acpi-ignore os-release)
# The guest's DHCPv6 client (busybox-static has none) is a static Go program of this module,
# built with the module's dependency versions (go.mod) and the host's Go.
repo=$(cd "$here/../../.." && pwd)
dhcp6c_pkg=./test/assets/guest/dhcp6c
# Packages besides the kernel. qemu-ga's libraries are checked with ld.so --list after unpacking.
packages=(busybox-static qemu-guest-agent libc6 libglib2.0-0 libpcre2-8-0 libnuma1 libudev1
  liburing2)
data_disk_mib=64

cache=${VMLET_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vmlet}/guest
mkdir -p "$cache"

# --- host tools -------------------------------------------------------------------------------
need=()
command -v apt-get >/dev/null || die "apt-get not found: the guest is built from Debian packages" 3
command -v dpkg-deb >/dev/null || die "dpkg-deb not found" 3
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v gzip >/dev/null || need+=(gzip)
command -v sha256sum >/dev/null || need+=(coreutils)
command -v flock >/dev/null || need+=(util-linux)
command -v go >/dev/null || PATH=$PATH:/usr/local/go/bin
command -v go >/dev/null || die "go not found: the guest's DHCPv6 client is built with it" 3
if ((${#need[@]})); then
  [ "$(id -u)" = 0 ] || die "missing host packages ${need[*]} and not root to install them" 3
  say "installing host packages: ${need[*]}"
  apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq \
    --no-install-recommends "${need[@]}" >&2
fi

go_version=$(go env GOVERSION)
builder_hash=$({
  cd "$here" && cat "${builder_files[@]}" dhcp6c/*.go
  cat "$repo/go.mod"
  echo "$go_version"
} | sha256sum | cut -c1-16)

# --- resolve package versions -------------------------------------------------------------------
# apt-cache takes ~1 s here (no pkgcache.bin), so the answer is cached per state of the apt lists.
resolve() {
  local kpkg
  kpkg=$(apt-cache depends --important linux-image-cloud-amd64 2>/dev/null |
    awk '/Depends: linux-image-[0-9]/ {print $2; exit}') || true
  [ -n "$kpkg" ] || return 1
  LC_ALL=C apt-cache policy "$kpkg" "${packages[@]}" | awk '
    /^[^ ]/ {pkg=$1; sub(/:$/, "", pkg)}
    /^  Candidate:/ {if ($2 == "(none)") exit 1; print pkg "=" $2}'
}
lists_sig=$({ echo "$builder_hash"; stat -c '%n %s %Y' /var/lib/apt/lists/* 2>/dev/null; } |
  sha256sum | cut -c1-16)
resolved_file="$cache/resolved-$lists_sig"
if [ -s "$resolved_file" ]; then
  resolved=$(cat "$resolved_file")
else
  if ! resolved=$(resolve); then
    [ "$(id -u)" = 0 ] || die "cannot resolve linux-image-cloud-amd64 (run apt-get update as root)" 3
    say "apt lists lack the packages: apt-get update"
    apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
    resolved=$(resolve) || die "cannot resolve packages after apt-get update"
    lists_sig=$({ echo "$builder_hash"; stat -c '%n %s %Y' /var/lib/apt/lists/* 2>/dev/null; } |
      sha256sum | cut -c1-16)
    resolved_file="$cache/resolved-$lists_sig"
  fi
  printf '%s\n' "$resolved" >"$resolved_file.$$" && mv "$resolved_file.$$" "$resolved_file"
fi
kernel_pkg=$(grep "^linux-image-" <<<"$resolved")

key=$({ echo "$builder_hash"; echo "$resolved"; } | sha256sum | cut -c1-16)
out="$cache/$key"
if [ -f "$out/manifest.txt" ]; then
  touch "$out" # marks it in use for the 30-day cleanup below
  echo "$out"
  exit 0
fi

# --- build (one builder at a time; others wait and then find the result) -------------------------
exec 9>"$cache/.lock"
if ! flock -n 9; then
  say "waiting for another build (lock $cache/.lock)"
  flock 9
fi
if [ -f "$out/manifest.txt" ]; then
  echo "$out"
  exit 0
fi
# Holding the lock: leftovers of killed builds and guests unused for 30 days can go.
rm -rf "$cache"/.build-*
find "$cache" -mindepth 1 -maxdepth 1 -mtime +30 \( -name 'resolved-*' -o -type d \) \
  -exec rm -rf {} + 2>/dev/null || true
start=$(date +%s.%N)
tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say "building $key ($kernel_pkg) in $tmp"

mkdir -p "$tmp/debs" "$tmp/pkg" "$tmp/root" "$tmp/out"
apt_opts=()
[ "$(id -u)" = 0 ] && apt_opts=(-o APT::Sandbox::User=root)
mapfile -t specs <<<"$resolved"
say "apt-get download ${#specs[@]} packages"
(cd "$tmp/debs" && apt-get "${apt_opts[@]}" -qq download "${specs[@]}" >&2)
for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$tmp/pkg"; done

pkg=$tmp/pkg root=$tmp/root
kver=$(ls "$pkg/lib/modules")
[ "$(wc -w <<<"$kver")" = 1 ] || die "expected one kernel in the kernel package, got: $kver"
cp "$pkg/boot/vmlinuz-$kver" "$tmp/out/vmlinuz"

# Tree: busybox + applet links, qemu-ga + libraries, modules, init and its scripts.
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,lib/x86_64-linux-gnu,lib64,lib/modules/vmlet} \
  "$root"/{etc/vmlet,etc/acpi/PWRF,etc/acpi-ignore/PWRF,usr/share/udhcpc} \
  "$root"/{proc,sys,dev,tmp,run,var/log,root,mnt}
ln -s ../run "$root/var/run"
cp "$pkg/bin/busybox" "$root/bin/busybox"
while read -r applet; do
  [ -e "$root/$applet" ] && continue
  ln -s /bin/busybox "$root/$applet"
done < <("$root/bin/busybox" --list-full)

cp "$pkg/usr/sbin/qemu-ga" "$root/usr/sbin/qemu-ga"
ldso=$(find "$pkg/lib" "$pkg/usr/lib" -name 'ld-linux-x86-64.so.2' -type f | head -n1)
[ -n "$ldso" ] || die "ld-linux-x86-64.so.2 not found in libc6"
libpath="$pkg/lib/x86_64-linux-gnu:$pkg/usr/lib/x86_64-linux-gnu"
listing=$("$ldso" --library-path "$libpath" --list "$root/usr/sbin/qemu-ga")
if grep -q 'not found' <<<"$listing"; then
  die "qemu-ga libraries missing (add their packages to build.sh): $(grep 'not found' <<<"$listing")"
fi
while read -r soname _ path _; do
  cp -L "$path" "$root/lib/x86_64-linux-gnu/$soname"
done < <(awk '$2 == "=>" && $3 ~ /^\// && $1 !~ /^\// {print}' <<<"$listing")
cp -L "$ldso" "$root/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$root/lib64/ld-linux-x86-64.so.2"

say "go build vmlet-dhcp6c ($go_version)"
# Reproducible: no cgo, no paths, no build id or VCS stamp; go.mod is never rewritten.
(cd "$repo" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOWORK=off GOFLAGS=-mod=readonly \
  go build -trimpath -buildvcs=false -ldflags='-s -w -buildid=' \
  -o "$root/usr/sbin/vmlet-dhcp6c" "$dhcp6c_pkg" >&2)

moddir="$pkg/lib/modules/$kver"
: >"$root/etc/vmlet/modules"
while read -r m; do
  m=${m%%#*}
  m=${m//[[:space:]]/}
  [ -n "$m" ] || continue
  ko=$(find "$moddir/kernel" -name "$m.ko" | head -n1)
  if [ -z "$ko" ]; then
    grep -q "/$m.ko\$" "$moddir/modules.builtin" && continue
    die "module $m is neither in $kver nor built in (compressed modules are not handled)"
  fi
  cp "$ko" "$root/lib/modules/vmlet/$m.ko"
  echo "$m" >>"$root/etc/vmlet/modules"
done <"$here/modules.txt"

install -m 0755 "$here/init" "$root/init"
install -m 0755 "$here/udhcpc.script" "$root/usr/share/udhcpc/vmlet.script"
install -m 0755 "$here/acpi-powerdown" "$root/etc/acpi/PWRF/00000080"
install -m 0755 "$here/acpi-ignore" "$root/etc/acpi-ignore/PWRF/00000080"
echo 'root:x:0:0:root:/root:/bin/sh' >"$root/etc/passwd"
echo 'root:x:0:' >"$root/etc/group"
echo 'vmlet-guest' >"$root/etc/hostname"
install -m 0644 "$here/os-release" "$root/etc/os-release" # what guest-get-osinfo reports

# newc entries for /dev and /dev/console (character device 5:1), so the kernel can open the
# initial console before init mounts devtmpfs. Written by hand: creating the node with mknod
# would need root, and the kernel accepts concatenated archives.
cpio_entry() { # name mode(hex) rdevmajor rdevminor
  local name=$1 namesize=$((${#1} + 1))
  printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
    0 "0x$2" 0 0 1 0 0 0 0 "$3" "$4" "$namesize" 0
  printf '%s\0' "$name"
  local pad=$(((4 - (110 + namesize) % 4) % 4))
  head -c "$pad" /dev/zero
}
{
  cpio_entry dev 41ED 0 0
  cpio_entry dev/console 2180 5 1
  cpio_entry TRAILER!!! 0 0 0
} >"$tmp/dev.cpio"

say "packing initramfs"
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | "$root/bin/busybox" cpio -o -H newc 2>/dev/null) \
  >"$tmp/root.cpio"
cat "$tmp/dev.cpio" "$tmp/root.cpio" | gzip -9n >"$tmp/out/initramfs.gz"

say "creating ${data_disk_mib} MiB data disk"
# The disk starts with a recognisable label so a guest can prove it reads this very disk.
truncate -s "${data_disk_mib}M" "$tmp/data.raw"
printf 'VMLET-DATA-DISK\n' | dd of="$tmp/data.raw" conv=notrunc status=none
qemu-img convert -q -f raw -O qcow2 "$tmp/data.raw" "$tmp/out/data.qcow2"

{
  echo "# vmlet test guest $key (builder $builder_hash)"
  echo "kernel $kver"
  for deb in "$tmp"/debs/*.deb; do
    dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"
  done
  echo "modules $(paste -sd' ' "$root/etc/vmlet/modules")"
  echo "vmlet-dhcp6c $go_version $(sha256sum <"$root/usr/sbin/vmlet-dhcp6c" | cut -c1-16)"
  echo "initramfs-bytes $(stat -c %s "$tmp/out/initramfs.gz")"
} >"$tmp/out/manifest.txt"

chmod 0755 "$tmp/out"
mv -T "$tmp/out" "$out"
say "built $out in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') s"
echo "$out"
