package vmimetrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
)

// TestVMIInfo: kubevirt_vmi_info carries virt-controller's labels, filled from the VMI.
func TestVMIInfo(t *testing.T) {
	live := vmletv1.EvictionStrategyLiveMigrate
	vmi := &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm1", Annotations: map[string]string{"vm.kubevirt.io/os": "linux", "vm.kubevirt.io/workload": "server"}},
		Spec:       vmletv1.VirtualMachineInstanceSpec{EvictionStrategy: &live},
		Status: vmletv1.VirtualMachineInstanceStatus{
			NodeName: "node-a", Phase: vmletv1.Running, Machine: &vmletv1.Machine{Type: "pc-q35-7.2"},
			GuestOSInfo: vmletv1.VirtualMachineInstanceGuestOSInfo{Name: "Debian", KernelRelease: "6.1.0", Machine: "x86_64", VersionID: "12"},
		},
	}
	got := read(t, []prometheus.Metric{VMIInfo(vmi)})
	want := map[string]string{"node": "node-a", "namespace": "ns", "name": "vm1", "phase": "running", "os": "linux", "workload": "server",
		"flavor": "", "instance_type": "", "preference": "", "guest_os_kernel_release": "6.1.0", "guest_os_machine": "pc-q35-7.2",
		"guest_os_arch": "x86_64", "guest_os_name": "Debian", "guest_os_version_id": "12",
		"evictable": "false", // LiveMigrate without LiveMigratable=True
		"outdated":  "false", "vmi_pod": ""}
	s, ok := got[sample{name: "kubevirt_vmi_info", labels: want}.key()]
	if !ok || s.value != 1 || len(got) != 1 {
		t.Fatalf("got %v", got)
	}
	vmi.Status.Conditions = []metav1.Condition{{Type: vmletv1.VirtualMachineInstanceIsMigratable, Status: metav1.ConditionTrue}}
	want["evictable"] = "true"
	if _, ok := read(t, []prometheus.Metric{VMIInfo(vmi)})[sample{name: "kubevirt_vmi_info", labels: want}.key()]; !ok {
		t.Error("a migratable LiveMigrate VMI is evictable")
	}
}

// TestPhaseTransitionSeconds: the time between the old and the new phase's transition
// timestamps, from the creation when the old phase is unset; nothing without a change.
func TestPhaseTransitionSeconds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(p vmletv1.VirtualMachineInstancePhase, s float64) vmletv1.VirtualMachineInstancePhaseTransitionTimestamp {
		return vmletv1.VirtualMachineInstancePhaseTransitionTimestamp{Phase: p, PhaseTransitionTimestamp: metav1.Time{Time: t0.Add(time.Duration(s * float64(time.Second)))}}
	}
	vmi := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.Time{Time: t0}}}
	vmi.Status.Phase = vmletv1.Scheduled
	vmi.Status.PhaseTransitionTimestamps = []vmletv1.VirtualMachineInstancePhaseTransitionTimestamp{at(vmletv1.Scheduled, 1.5)}
	if s, ok := PhaseTransitionSeconds("", vmi); !ok || s != 1.5 {
		t.Errorf("from creation: %v %v", s, ok)
	}
	vmi.Status.Phase = vmletv1.Running
	vmi.Status.PhaseTransitionTimestamps = append(vmi.Status.PhaseTransitionTimestamps, at(vmletv1.Running, 4))
	if s, ok := PhaseTransitionSeconds(vmletv1.Scheduled, vmi); !ok || s != 2.5 {
		t.Errorf("Scheduled → Running: %v %v", s, ok)
	}
	if _, ok := PhaseTransitionSeconds(vmletv1.Running, vmi); ok {
		t.Error("no change observed")
	}
	if _, ok := PhaseTransitionSeconds(vmletv1.Pending, vmi); ok {
		t.Error("a phase without a timestamp observed")
	}
}

// TestIdentityInterfaces: the launcher's NIC ids map back to the VMI's interface names
// (KubeVirt's interface label), hashed ids of long names included.
func TestIdentityInterfaces(t *testing.T) {
	long := "an-interface-name-longer-than-qemu-ids-allow"
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default"}, {Name: long}}
	id := Identity(vmi)
	for nic, want := range map[string]string{translate.NICID("default"): "default", translate.NICID(long): long} {
		if id.Interfaces[nic] != want {
			t.Errorf("NIC %s: %q, want %q", nic, id.Interfaces[nic], want)
		}
	}
}
