package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
)

// TestSetMigratable: LiveMigratable is the spec's verdict, unless the launcher refuses an
// outgoing migration of the running QEMU (a vCPU unplugged under TCG), which it then names; a
// spec that cannot migrate keeps its own reason.
func TestSetMigratable(t *testing.T) {
	container := vmletv1.Volume{Name: "root", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "img"}}}
	masq := func() *vmletv1.VirtualMachineInstance {
		vmi := &vmletv1.VirtualMachineInstance{}
		vmi.Spec.Volumes = []vmletv1.Volume{container}
		vmi.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
		vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
		return vmi
	}
	bridged := masq()
	bridged.Spec.Domain.Devices.Interfaces[0].InterfaceBindingMethod = vmletv1.InterfaceBindingMethod{Bridge: &vmletv1.InterfaceBridge{}}
	const refused = "unsafe in this configuration: a vCPU was unplugged from this QEMU under TCG"
	for _, tc := range []struct {
		name    string
		vmi     *vmletv1.VirtualMachineInstance
		dom     DomainState
		status  metav1.ConditionStatus
		reason  string
		message string
	}{
		{"migratable", masq(), DomainState{}, metav1.ConditionTrue, migration.ReasonMigratable, ""},
		{"launcher refuses", masq(), DomainState{MigrationRefused: refused}, metav1.ConditionFalse, migration.ReasonHotplugNotMigratable, "cannot migrate: " + refused},
		{"spec first", bridged, DomainState{MigrationRefused: refused}, metav1.ConditionFalse, migration.ReasonInterfaceNotMigratable,
			"cannot migrate VMI which does not use masquerade to connect to the pod network (interface default uses a bridge binding)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setMigratable(tc.vmi, tc.dom)
			c := meta.FindStatusCondition(tc.vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable)
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.message {
				t.Errorf("LiveMigratable %+v, want %s %s %q", c, tc.status, tc.reason, tc.message)
			}
		})
	}
}
