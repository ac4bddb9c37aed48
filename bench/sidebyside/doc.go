// Command sidebyside runs vmlet side by side with the libvirt stack on this host and writes the
// results as JSON (`sidebyside run`), and renders that JSON as Markdown for BENCHMARKS.md
// (`sidebyside render`). `make bench` (hack/bench.sh) runs both after the Go benchmarks.
//
// Every comparison runs its modes interleaved in the same process (round r runs the modes in an
// order rotated by r, so drift and the other core's load hit each mode alike) for at least ten
// rounds, and reports median, min and max per mode plus ratios against vmlet. Numbers are
// reported, never judged: the program fails only when something errors.
//
// The modes, all with the same test guest (direct kernel boot of test/assets/guest, same
// command line), QEMU binary, TCG, q35, vCPUs, memory and devices, every QEMU running as the
// same unprivileged user (nobody):
//
//   - vmlet: a vmlet-launcher process per VM, driven over its gRPC API (qemu/launcher.Client).
//   - libvirt: libvirtd + virtlogd 9.0 (Debian) in session mode as nobody (KubeVirt's non-root
//     shape), with their own config, runtime and cache folders under a temporary folder, driven
//     in-process with github.com/digitalocean/go-libvirt; the daemons run under a child
//     subreaper (`sidebyside reap`) so that destroyed QEMUs are reaped at once.
//   - bare: QEMU exec'd directly with vmlet's own command line (qemu.BuildArgv) and driven over
//     a minimal raw QMP client: the floor.
//
// The comparisons: start (request → running, → guest boot marker), pause + resume round trip,
// control-plane memory per VM with 1 and 10 VMs, live migration of a 1 GiB guest (idle and
// dirtying memory). The pure parts (statistics, libvirt domain XML, Markdown) have unit tests;
// the rest needs root, QEMU and libvirt and runs only from `make bench`.
package main
