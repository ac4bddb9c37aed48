package qemu

import "fmt"

// PanicModel is a guest panic device (libvirt's <panic model=...>): the guest kernel's
// pvpanic driver writes to it when it panics, and QEMU emits GUEST_PANICKED.
type PanicModel string

// Panic device models.
const (
	// PanicISA is QEMU's ISA pvpanic device (-device pvpanic) at its default I/O port 0x505,
	// described to the guest by the ACPI node QEMU0001 (Linux: pvpanic-mmio). libvirt's
	// model='isa'.
	PanicISA PanicModel = "isa"
	// PanicPCI is QEMU's pvpanic-pci (PCI 1b36:0011; Linux: pvpanic-pci) at a fixed pcie.0
	// address. libvirt's model='pvpanic'.
	PanicPCI PanicModel = "pci"
)

// QEMU names of the panic devices and the pvpanic-pci's fixed address.
const (
	devPanicISA = "panic_isa"
	devPanicPCI = "panic_pci"
	addrPanic   = "0xa"
)

// PanicExitStatus is QEMU's exit status after a guest panic when QEMU exits by itself
// (-action panic=exit-failure). vmlet pauses instead and quits QEMU (status 0); the
// classification still takes it.
const PanicExitStatus = 1

// validatePanic checks the panic devices: known models, each at most once.
func (s *Spec) validatePanic() error {
	seen := map[PanicModel]bool{}
	for i, m := range s.Panic {
		field := fmt.Sprintf("panic[%d]", i)
		switch m {
		case PanicISA, PanicPCI:
		default:
			return specErr(field, string(m), `must be "isa" or "pci"`)
		}
		if seen[m] {
			return specErr(field, string(m), "listed twice")
		}
		seen[m] = true
	}
	return nil
}

// panicArgs plans the panic devices and what a panic does. With any device, a guest panic
// makes QEMU emit GUEST_PANICKED (action pause) and stop the guest in run state guest-panicked
// (-action panic=pause); QEMU keeps running, so the event is always read, and the VM then
// quits QEMU itself (watchShutdown): the VM ends as libvirt's default on_crash (destroy) ends
// it, classified ExitGuestPanic, never as the guest powering off. QEMU exiting by itself on a
// panic (exit-failure, or its default shutdown) could exit before the event left its monitor
// (CI once saw a pvpanic guest's end as a crash). Without a device the guest cannot tell QEMU
// of a panic at all, so no -action is emitted and the argv is unchanged.
func (b *argv) panicArgs(models []PanicModel) {
	if len(models) == 0 {
		return
	}
	b.opt("-action", "panic", "pause")
	for _, m := range models {
		switch m {
		case PanicISA:
			b.opt("-device", "", "pvpanic", "id", devPanicISA)
		case PanicPCI:
			b.opt("-device", "", "pvpanic-pci", "id", devPanicPCI, "bus", "pcie.0", "addr", addrPanic)
		}
	}
}
