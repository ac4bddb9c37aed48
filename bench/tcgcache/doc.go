// Command tcgcache measures what QEMU's TCG translation cache size (-accel tcg,tb-size=N) costs
// and buys with a real distribution guest: time from exec to the serial login prompt, and QEMU's
// RSS at the prompt and at its peak (VmHWM), for several sizes and QEMU's own default (no
// tb-size). It chose the default of the agents' --tcg-cache-mib (BENCHMARKS.md, "TCG translation
// cache size").
//
// The guest is hack/distroguest's Debian 12 image (systemd, udev, cloud-init with a NoCloud seed,
// openssh-server, linux-image-amd64 and its initrd), booted with -kernel/-initrd, root=/dev/vda
// and console=ttyS0 (systemd's serial getty), from a fresh qcow2 overlay per boot so that every
// boot is a first boot (cloud-init does all of its first-boot work, ssh host keys included).
//
// Two modes run the same guest with the same vCPUs, memory and machine (q35, -cpu max, TCG):
//
//   - qemu: plain QEMU, a hand-written command line (one virtio-blk disk, the serial console in a
//     file, nothing else).
//   - vmlet: the driver the launcher uses (qemu.Start) with the devices the node agent gives
//     every VM (serial console on a socket plus log file, guest agent channel, virtio-scsi
//     controller, 4 free PCIe root ports).
//
// Each round boots every (mode, size) once, one guest at a time, in an order rotated by the
// round number (so drift and the other sessions' load hit every size alike); the 1-minute load
// average is recorded before and after every boot. `tcgcache run` writes JSON, `tcgcache render`
// turns it into the Markdown table. Numbers are reported, never judged: the program fails only
// when a boot errors.
//
//	dir=$(bash hack/distroguest/build.sh)
//	go run ./bench/tcgcache run -guest "$dir" -rounds 3 -out bench/tcgcache.json
//	go run ./bench/tcgcache render -in bench/tcgcache.json
package main
