#!/usr/bin/env bash
# Prints the `vmlet local --image REF=SOURCE` flags `make run` passes: the images local mode
# serves from OCI layouts of the project's test guest (these machines reach no image registry),
# written once into $VMLET_CACHE/images and kept there (idempotent: an unchanged image is not
# rewritten). Progress goes to stderr; the flags, one per line, to stdout.
#
#   vmlet.dev/testguest:latest       kernelBoot image (/vmlinuz, /initramfs.gz): the demo VMI
#   vmlet.dev/testguest-disk:latest  BIOS-bootable containerDisk of the same guest
#   registry:5000/kubevirt/...       the images of KubeVirt's examples (shared/kubevirt-examples):
#                                    containerDisks → the bootable disk; alpine-ext-kernel-boot-demo
#                                    → the guest's kernel and initrd at the alpine paths
#
# Stand-ins, not the real images: a KubeVirt example boots the test guest (busybox +
# qemu-guest-agent), not cirros or fedora.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${VMLET_CACHE:-$HOME/.cache/vmlet}/images
say() { echo "local-images: $*" >&2; }

guest=$(bash test/assets/guest/build.sh | tail -n1)
say "bootable disk of the test guest (test/assets/bootdisk)..."
disk=$(bash test/assets/bootdisk/build.sh | tail -n1)/boot.qcow2

# Built once, run three times (three `go run`s would link it three times).
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
go build -o "$tool/guestimage" ./hack/guestimage
kernel=$("$tool/guestimage" --guest "$guest" --out "$cache/testguest")
alpine=$("$tool/guestimage" --guest "$guest" --out "$cache/alpine-kernel-boot" \
  --kernel-path /boot/vmlinuz-virt --initrd-path /boot/initramfs-virt)
bootable=$("$tool/guestimage" --disk "$disk" --out "$cache/testguest-disk")

echo "--image=vmlet.dev/testguest:latest=$kernel"
echo "--image=vmlet.dev/testguest-disk:latest=$bootable"
echo "--image=registry:5000/kubevirt/alpine-ext-kernel-boot-demo:devel=$alpine"
for name in cirros-container-disk-demo fedora-with-test-tooling-container-disk alpine-container-disk-demo; do
  echo "--image=registry:5000/kubevirt/$name:devel=$bootable"
done
