package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func TestMigrationRole(t *testing.T) {
	now := metav1.Now()
	vmi := func(node string, m func(*vmletv1.VirtualMachineInstanceMigrationState)) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.Status.NodeName = node
		if m != nil {
			v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "m", SourceNode: "a", TargetNode: "b"}
			m(v.Status.MigrationState)
		}
		return v
	}
	none := func(*vmletv1.VirtualMachineInstanceMigrationState) {}
	for _, tc := range []struct {
		name string
		vmi  *vmletv1.VirtualMachineInstance
		node string
		want migrationRole
	}{
		{"no migration", vmi("a", nil), "a", roleNone},
		{"source while it runs", vmi("a", none), "a", roleSource},
		{"target while it runs", vmi("a", none), "b", roleTarget},
		{"a third node", vmi("a", none), "c", roleNone},
		{"source after completion", vmi("a", func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.Completed = true }), "a", roleSourceDone},
		{"source after take-over", vmi("b", none), "a", roleSourceDone},
		{"target after take-over", vmi("b", func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.Completed = true }), "b", roleNone},
		{"source after failure", vmi("a", func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.Failed = true }), "a", roleNone},
		{"target after failure", vmi("a", func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.Failed = true }), "b", roleTargetFailed},
		{"target of a deleted vmi", func() *vmletv1.VirtualMachineInstance {
			v := vmi("a", none)
			v.DeletionTimestamp = &now
			return v
		}(), "b", roleTargetFailed},
		{"target, taken over by a third node", vmi("c", func(s *vmletv1.VirtualMachineInstanceMigrationState) {
			s.Completed, s.TargetNodeDomainReadyTimestamp = true, &now
		}), "b", roleTargetFailed},
		{"same node both ends", vmi("a", func(s *vmletv1.VirtualMachineInstanceMigrationState) { s.TargetNode = "a" }), "a", roleNone},
	} {
		if got := roleOf(tc.vmi, tc.node); got != tc.want {
			t.Errorf("%s: roleOf = %d, want %d", tc.name, got, tc.want)
		}
	}
}
