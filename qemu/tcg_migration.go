package qemu

import (
	"strconv"
	"strings"

	"github.com/vmlet/vmlet/qemu/accel"
)

// LiveMigrationLosesWrites reports whether a live pre-copy migration of a guest that runs
// under accelerator accelKind in QEMU version (the QMP greeting's "major.minor.micro") can
// lose the guest's memory writes. Under TCG before QEMU 9.0, the migration's dirty-bitmap sync
// clears a page's dirty bit without resetting the vCPU's TLB entries that write to it
// directly, so later writes through those entries are never marked and the page is not sent
// again: the target runs on stale memory (seen here as "BUG: Bad rss-counter state" and
// segfaults in the guest after a migration). QEMU 9.0 resets the TLB entries there
// (physmem: "Fix migration dirty bitmap coherency with TCG memory access", Nicholas Piggin,
// 2024). A caller migrates such a guest with its vCPUs stopped (stop-and-copy), which needs no
// dirty tracking of vCPU writes; device writes are always tracked. An unreadable version
// counts as affected. Pure.
func LiveMigrationLosesWrites(accelKind, version string) bool {
	return tcgBefore(accelKind, version, 9)
}

// tcgBefore reports whether accelKind is TCG and QEMU version ("major.minor.micro") is older
// than major; an unreadable version counts as older. Pure.
func tcgBefore(accelKind, version string, major int) bool {
	if accelKind != string(accel.TCG) {
		return false
	}
	m, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(m)
	return err != nil || n < major
}
