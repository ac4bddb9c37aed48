package launcherpod_test

import (
	"errors"
	"testing"

	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// TestTargetSELinuxLevel: a target gets the source's level unless matchSELinuxLevelOnMigration
// is false; a source without SELinux ("none") gives none; an unset context is an error.
func TestTargetSELinuxLevel(t *testing.T) {
	src := "system_u:system_r:virt_launcher.process:s0:c7,c300"
	for _, c := range []struct {
		ctx   string
		match *bool
		want  string
		err   error
	}{
		{src, nil, "s0:c7,c300", nil},
		{src, ptr.To(true), "s0:c7,c300", nil},
		{src, ptr.To(false), "", nil},
		{"none", nil, "", nil},
		{"", nil, "", launcherpod.ErrNoSELinuxContext},
		{"", ptr.To(false), "", nil},
	} {
		vmi := &vmletv1.VirtualMachineInstance{Status: vmletv1.VirtualMachineInstanceStatus{SelinuxContext: c.ctx}}
		got, err := launcherpod.TargetSELinuxLevel(vmi, vmletv1.MigrationConfiguration{MatchSELinuxLevelOnMigration: c.match})
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("launcherpod.TargetSELinuxLevel(%q, match %v) = %q, %v; want %q, %v", c.ctx, c.match, got, err, c.want, c.err)
		}
	}
	if _, err := launcherpod.TargetSELinuxLevel(&vmletv1.VirtualMachineInstance{Status: vmletv1.VirtualMachineInstanceStatus{SelinuxContext: "garbage"}},
		vmletv1.MigrationConfiguration{}); err == nil {
		t.Error("a context that does not parse gave a level")
	}
}

// TestBuildSELinuxOptions: the pod carries the configured type (and a target's level); without
// either it has no seLinuxOptions (the runtime's container_t at a level of its own).
func TestBuildSELinuxOptions(t *testing.T) {
	vmi := testVMI(nil)
	o := opts(nil)
	pod, err := launcherpod.Build(vmi, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.SecurityContext.SELinuxOptions != nil {
		t.Errorf("seLinuxOptions %+v with none configured", pod.Spec.SecurityContext.SELinuxOptions)
	}
	o.SELinuxType, o.SELinuxLevel = "virt_launcher.process", "s0:c7,c300"
	if pod, err = launcherpod.Build(vmi, o, nil); err != nil {
		t.Fatal(err)
	}
	if s := pod.Spec.SecurityContext.SELinuxOptions; s == nil || s.Type != "virt_launcher.process" || s.Level != "s0:c7,c300" {
		t.Errorf("seLinuxOptions %+v", s)
	}
	for v, ok := range map[string]bool{"": true, " virt_launcher.process ": true, "container_t": true, "a:b": false, "x y": false} {
		if _, err := launcherpod.ParseSELinuxType(v); (err == nil) != ok {
			t.Errorf("launcherpod.ParseSELinuxType(%q): %v", v, err)
		}
	}
}
