package vmimetrics

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// TestMigration: a source's migration under way gives KubeVirt's migration domain stats (the
// dirty rate in bytes per second, pages × 4 KiB; the transfer rate); a target, an ended or no migration, none.
func TestMigration(t *testing.T) {
	st := &pb.MigrationStatus{Role: "source", Status: "active", TransferredBytes: 100, RemainingBytes: 50, TotalBytes: 150, DirtyPagesRate: 10, MemoryTransferRateBytesPerSec: 125000000}
	got := read(t, Migration(testVMI, st))
	for n, v := range map[string]float64{
		"kubevirt_vmi_migration_data_bytes_total":           150,
		"kubevirt_vmi_migration_data_remaining_bytes":       50,
		"kubevirt_vmi_migration_data_processed_bytes":       100,
		"kubevirt_vmi_migration_dirty_memory_rate_bytes":    40960,
		"kubevirt_vmi_migration_memory_transfer_rate_bytes": 125000000,
	} {
		k := sample{name: n, labels: vmiOnly()}.key()
		if s, ok := got[k]; !ok || s.value != v {
			t.Errorf("%s = %v (present %v), want %v", k, s.value, ok, v)
		}
		delete(got, k)
	}
	for k := range got {
		t.Errorf("unexpected %s", k)
	}
	for _, st := range []*pb.MigrationStatus{
		{Role: "target", Status: "active", TotalBytes: 1},
		{Role: "source", Status: "completed", TotalBytes: 1},
		{Role: "", Status: "none"},
		nil,
	} {
		if ms := Migration(testVMI, st); len(ms) != 0 {
			t.Errorf("%v: %d series", st, len(ms))
		}
	}
}

// TestMigrationOutcome: the VMI's last migration gives succeeded or failed 1, labelled vmi,
// vmim, namespace as virt-controller's; none while it runs or without one.
func TestMigrationOutcome(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1"}}
	if ms := MigrationOutcome(vmi, ""); len(ms) != 0 {
		t.Errorf("no migration: %d series", len(ms))
	}
	vmi.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{SourceNode: "node-a", StartTimestamp: &metav1.Time{Time: time.Now()}}
	if ms := MigrationOutcome(vmi, "mig1"); len(ms) != 0 {
		t.Errorf("running: %d series", len(ms))
	}
	if !migrating(vmi, "node-a") || migrating(vmi, "node-b") {
		t.Error("migrating: wrong node")
	}
	vmi.Status.MigrationState.Completed = true
	got := read(t, MigrationOutcome(vmi, "mig1"))
	if _, ok := got[sample{name: "kubevirt_vmi_migration_succeeded", labels: map[string]string{"vmi": "vm1", "vmim": "mig1", "namespace": "ns"}}.key()]; !ok || len(got) != 1 {
		t.Errorf("completed: %v", got)
	}
	if migrating(vmi, "node-a") {
		t.Error("a completed migration is not running")
	}
	vmi.Status.MigrationState.Completed, vmi.Status.MigrationState.Failed = false, true
	got = read(t, MigrationOutcome(vmi, "mig1"))
	if _, ok := got[sample{name: "kubevirt_vmi_migration_failed", labels: map[string]string{"vmi": "vm1", "vmim": "mig1", "namespace": "ns"}}.key()]; !ok || len(got) != 1 {
		t.Errorf("failed: %v", got)
	}
}
