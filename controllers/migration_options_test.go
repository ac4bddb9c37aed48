package controllers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
)

// TestMigrationOptions: the QEMU options both nodes compute for a migration from the recorded
// configuration and the vmi: parallel streams only where QEMU and the limits allow them, and
// the stepped downtime limit always.
func TestMigrationOptions(t *testing.T) {
	withConfig := func(c vmletv1.MigrationConfiguration) *vmletv1.VirtualMachineInstance {
		vmi := &vmletv1.VirtualMachineInstance{}
		vmi.Status.MigrationState = &vmletv1.VirtualMachineInstanceMigrationState{MigrationConfiguration: &c}
		return vmi
	}
	limited := withConfig(vmletv1.MigrationConfiguration{})
	limited.Spec.Domain.Resources.Limits = vmletv1.ResourceList{vmletv1.ResourceCPU: resource.MustParse("1")}
	copied := []translate.CopiedDisk{{ID: "scratch"}}
	base := MigrationOptions{Downtime: 50 * time.Millisecond, MaxDowntime: 300 * time.Millisecond}
	with := func(f func(*MigrationOptions)) MigrationOptions { o := base; f(&o); return o }
	for _, c := range []struct {
		name string
		vmi  *vmletv1.VirtualMachineInstance
		copy []translate.CopiedDisk
		want MigrationOptions
	}{
		{"defaults", &vmletv1.VirtualMachineInstance{}, nil, with(func(o *MigrationOptions) { o.MultifdChannels = 2 })},
		{"copied disks", &vmletv1.VirtualMachineInstance{}, copied, with(func(o *MigrationOptions) { o.MultifdChannels = 2 })},
		{"post-copy allowed: one stream", withConfig(vmletv1.MigrationConfiguration{AllowPostCopy: ptr.To(true)}), nil,
			with(func(o *MigrationOptions) { o.AllowPostcopy = true })},
		{"post-copy allowed, disks copied: pre-copy with streams", withConfig(vmletv1.MigrationConfiguration{AllowPostCopy: ptr.To(true)}), copied,
			with(func(o *MigrationOptions) { o.MultifdChannels = 2 })},
		{"bandwidth limited: one stream", withConfig(vmletv1.MigrationConfiguration{BandwidthPerMigration: ptr.To(resource.MustParse("16Mi"))}), nil,
			with(func(o *MigrationOptions) { o.BandwidthBytesPerSec = 16 << 20 })},
		{"cpu limit: one stream", limited, nil, base},
		{"auto-converge", withConfig(vmletv1.MigrationConfiguration{AllowAutoConverge: ptr.To(true)}), nil,
			with(func(o *MigrationOptions) { o.AutoConverge, o.MultifdChannels = true, 2 })},
	} {
		if diff := cmp.Diff(c.want, migrationOptions(c.vmi, c.copy)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
