// Command accel prints the accelerator vmlet would use on this host and why, as package
// qemu/accel decides it (KVM only where it really works, TCG otherwise):
//
//	go run ./hack/accel    # e.g. "tcg (kvm_pvm module loaded: nested PVM KVM cannot run real guests)"
//
// hack/bench.sh records its line in BENCHMARKS.md.
package main
