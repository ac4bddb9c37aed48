// Command guestimage writes the test guest (test/assets/guest) as a kernelBoot image in an OCI
// layout and prints its reference, "oci:DIR:TAG". `make run` points the demo VMI's image at it:
//
//	vmlet local --image vmlet.dev/testguest:latest="$(go run ./hack/guestimage --guest "$(bash test/assets/guest/build.sh)" --out DIR)"
//
// With --disk FILE it writes a KubeVirt containerDisk (FILE at /disk/) instead: `make run` serves
// the test guest's BIOS-bootable disk (test/assets/bootdisk) this way, as the stand-in for the
// containerDisk images of KubeVirt's examples.
//
// The kernel and initrd keep their names in the guest's build folder (/vmlinuz, /initramfs.gz),
// which config/samples/vmi-demo.yaml names: a demo VMI kept in an older state folder still boots.
//
// It is idempotent: a layout that already holds the same image under the tag is kept, another
// one is replaced (written next to it, then swapped in).
package main
