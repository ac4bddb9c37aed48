package controllers_test

import (
	"testing"

	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/selinuxlabel"
)

// TestComputedLevel: levels across a migration. A target keeps the source's level
// (status.selinuxContext) when matchSELinuxLevelOnMigration is unset or true and gets one of its
// own, never the source's, when it is false; a vmi that is not migrating keeps the level of its
// status (an agent restart) and otherwise gets the one of its UID.
func TestComputedLevel(t *testing.T) {
	const src = "system_u:system_r:container_t:s0:c7,c300"
	vmi := func(ctx string, match *bool) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.UID = "uid-1"
		v.Status.SelinuxContext = ctx
		v.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationUID: "mig-1",
			MigrationConfiguration: &vmletv1.MigrationConfiguration{MatchSELinuxLevelOnMigration: match}}
		return v
	}
	own := selinuxlabel.LevelFor("uid-1", nil)
	for _, c := range []struct {
		name   string
		v      *vmletv1.VirtualMachineInstance
		target bool
		want   string
	}{
		{"target, match unset", vmi(src, nil), true, "s0:c7,c300"},
		{"target, match true", vmi(src, ptr.To(true)), true, "s0:c7,c300"},
		{"target, match false", vmi(src, ptr.To(false)), true, selinuxlabel.LevelFor("uid-1/mig-1", map[string]bool{"s0:c7,c300": true})},
		{"target of a source without SELinux", vmi(controllers.SELinuxNone, nil), true, own},
		{"restarted agent", vmi(src, nil), false, "s0:c7,c300"},
		{"new vmi", vmi("", nil), false, own},
	} {
		got := controllers.ComputedLevel(c.v, c.target)
		if got != c.want {
			t.Errorf("%s: level %q, want %q", c.name, got, c.want)
		}
		if c.name == "target, match false" && got == "s0:c7,c300" {
			t.Errorf("%s: the target got the source's level", c.name)
		}
	}
}
