package local

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func TestSummary(t *testing.T) {
	vmi := func(st vmletv1.VirtualMachineInstanceStatus) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{Status: st}
		v.Namespace, v.Name = "default", "demo"
		return v
	}
	for _, tc := range []struct {
		name string
		st   vmletv1.VirtualMachineInstanceStatus
		want string
	}{
		{"nothing known", vmletv1.VirtualMachineInstanceStatus{}, "VMI default/demo is Pending"},
		{"running under TCG", vmletv1.VirtualMachineInstanceStatus{
			Phase:      vmletv1.Running,
			Interfaces: []vmletv1.VirtualMachineInstanceNetworkInterface{{Name: "default", IP: "198.19.118.2", IPs: []string{"198.19.118.2", "fd76::2"}}, {Name: "none"}},
			Launcher:   &vmletv1.LauncherStatus{PID: 42, Accelerator: vmletv1.AcceleratorTCG, AccelerationReason: "no vmx/svm in /proc/cpuinfo", QEMUVersion: "7.2.15"},
			Conditions: []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceReady, Status: "True", Reason: "Running"}},
		}, "VMI default/demo is Running; IP 198.19.118.2, fd76::2 (default); accelerator tcg, emulated: no vmx/svm in /proc/cpuinfo; QEMU 7.2.15 pid 42"},
		{"kvm, no reason printed", vmletv1.VirtualMachineInstanceStatus{
			Phase:    vmletv1.Running,
			Launcher: &vmletv1.LauncherStatus{Accelerator: vmletv1.AcceleratorKVM, AccelerationReason: "usable"},
		}, "VMI default/demo is Running; accelerator kvm"},
		{"paused", vmletv1.VirtualMachineInstanceStatus{
			Phase:      vmletv1.Running,
			Conditions: []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceReady, Status: "False", Reason: "Paused"}},
		}, "VMI default/demo is Running (not ready: Paused)"},
		{"failed", vmletv1.VirtualMachineInstanceStatus{
			Phase: vmletv1.Failed, Reason: "QEMUDied",
			Conditions: []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceReady, Status: "False", Reason: "QEMUDied", Message: "QEMU ended"}},
		}, "VMI default/demo is Failed (QEMUDied: QEMU ended)"},
	} {
		if got := Summary(vmi(tc.st)); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
