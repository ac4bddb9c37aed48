package vmimetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// pageSize is QEMU's target page size on x86 (query-migrate's ram.page-size), by which libvirt
// turns dirty-pages-rate into the bytes per second KubeVirt exports.
const pageSize = 4096

// activeMigration are query-migrate states of a migration still under way.
var activeMigration = map[string]bool{
	"setup": true, "active": true, "postcopy-active": true, "postcopy-paused": true,
	"postcopy-recover": true, "pre-switchover": true, "device": true, "wait-unplug": true,
}

// Migration maps the source launcher's view of an outgoing migration (GetMigrationStatus) to
// KubeVirt's migration domain stats: none unless this launcher is the source of a migration
// under way.
func Migration(id VMI, st *pb.MigrationStatus) []prometheus.Metric {
	if st.GetRole() != "source" || !activeMigration[st.GetStatus()] {
		return nil
	}
	s := newSeries(id)
	s.add(MigDataTotal, float64(st.GetTotalBytes()))
	s.add(MigDataRemaining, float64(st.GetRemainingBytes()))
	s.add(MigDataProcessed, float64(st.GetTransferredBytes()))
	if r := st.GetDirtyPagesRate(); r >= 0 {
		s.add(MigDirtyRate, float64(r)*pageSize)
	}
	s.add(MigTransferRate, float64(st.GetMemoryTransferRateBytesPerSec()))
	return s.out
}

// migrating reports whether the VMI's outgoing migration runs on node now.
func migrating(vmi *vmletv1.VirtualMachineInstance, node string) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.SourceNode == node && ms.StartTimestamp != nil && !ms.Completed && !ms.Failed
}

// MigrationOutcome maps the VMI's last migration (status.migrationState) to KubeVirt's
// kubevirt_vmi_migration_succeeded / _failed (1 for the migration's outcome; vmim is the
// migration's name, "" when unknown); none while it runs.
func MigrationOutcome(vmi *vmletv1.VirtualMachineInstance, vmim string) []prometheus.Metric {
	ms := vmi.Status.MigrationState
	if ms == nil {
		return nil
	}
	s := &series{}
	switch {
	case ms.Failed:
		s.add(MigrationFailed, 1, vmi.Name, vmim, vmi.Namespace)
	case ms.Completed:
		s.add(MigrationSucceeded, 1, vmi.Name, vmim, vmi.Namespace)
	}
	return s.out
}
