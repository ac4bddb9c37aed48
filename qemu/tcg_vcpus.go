package qemu

import "github.com/vmlet/vmlet/qemu/accel"

// Limits of vCPU hotplug under TCG, measured on the bare emulator here (device_add, the guest
// onlining the vCPU, device_del, the guest ejecting it, then idling, plugging or migrating):
//
//   - before QEMU 10 an unplug crashes QEMU: 7.2 (Debian 1:7.2+dfsg-7+deb12u18) aborts with heap
//     corruption ("free(): invalid pointer", "corrupted size vs. prev_size") within seconds after
//     the guest ejected a TCG vCPU, with or without MTTCG, and a migration started after one
//     fails the same way. Versions between 7.2 and 10.0 are unmeasured and count as affected,
//     as does an unreadable version (TCGUnplugCrashes).
//   - on QEMU 10.0 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1) unplugs are fine and a migration after
//     one usually completes — but not always: one started after a plug and an unplug stayed in
//     "setup" for good in 1 of 8 runs under load (TestCPUMemoryHotplug, 2026-12-06), so it is
//     refused too (tcgMigrateAfterUnplugRefused) —, a vCPU plugged after an unplug leaves the VM unable to migrate (the
//     migration stays in "setup" for good), and plug/unplug cycles abort QEMU once it created
//     maxcpus+1 vCPU threads in its life (tcg_register_thread: "assertion failed: (n <
//     tcg_max_ctxs)": an unplugged TCG vCPU keeps its translation context). So under TCG a
//     plug after an unplug is refused (tcgPlugAfterUnplugRefused) until a new QEMU runs the
//     guest (a restart); without unplugs QEMU never creates more than maxcpus.
//
// KVM has none of these limits.

// TCGUnplugCrashes reports whether unplugging a vCPU crashes QEMU version ("major.minor.micro")
// running under accelerator accelKind. Pure.
func TCGUnplugCrashes(accelKind, version string) bool {
	return tcgBefore(accelKind, version, 10)
}

// tcgPlugAfterUnplugRefused reports whether plugging a vCPU is refused for a QEMU under
// accelerator k that has had a vCPU unplugged in its life. Pure.
func tcgPlugAfterUnplugRefused(k accel.Kind, unplugged bool) bool {
	return k == accel.TCG && unplugged
}

// tcgMigrateAfterUnplugRefused reports whether an outgoing migration is refused for a QEMU
// under accelerator k that has had a vCPU unplugged in its life. Pure.
func tcgMigrateAfterUnplugRefused(k accel.Kind, unplugged bool) bool {
	return k == accel.TCG && unplugged
}
