package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// TestDeepCopyIsDeep changes every kind of nested value in a copy and checks the original kept
// its values.
func TestDeepCopyIsDeep(t *testing.T) {
	orig := fullVMI("copy")
	orig.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	orig.Status.Launcher = &vmletv1.LauncherStatus{PID: 1}
	want := fullVMI("copy")
	want.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}
	want.Status.Launcher = &vmletv1.LauncherStatus{PID: 1}

	obj := orig.DeepCopyObject()
	cp, ok := obj.(*vmletv1.VirtualMachineInstance)
	if !ok {
		t.Fatalf("DeepCopyObject returned %T", obj)
	}
	if !equality.Semantic.DeepEqual(cp, orig) {
		t.Fatalf("copy differs from the original")
	}
	*cp.Spec.Domain.Memory.Guest = resource.MustParse("1Gi")
	cp.Spec.Domain.Resources.Requests["memory"] = resource.MustParse("2Gi")
	*cp.Spec.Domain.Devices.Disks[0].BootOrder = 7
	cp.Spec.Domain.Devices.Disks[0].Disk.Bus = vmletv1.DiskBusSATA
	cp.Spec.Domain.Devices.Interfaces[0].Ports[0].Port = 2222
	cp.Spec.NodeSelector["kubernetes.io/os"] = "windows"
	cp.Spec.Volumes[1].CloudInitNoCloud.NetworkDataSecretRef.Name = "other"
	cp.Spec.Volumes[3].PersistentVolumeClaim.ClaimName = "other"
	*cp.Spec.EvictionStrategy = vmletv1.EvictionStrategyNone
	cp.Status.Conditions[0].Status = metav1.ConditionFalse
	cp.Status.Launcher.PID = 2
	if !equality.Semantic.DeepEqual(orig, want) {
		t.Fatalf("changing the copy changed the original")
	}

	list := &vmletv1.VirtualMachineInstanceList{Items: []vmletv1.VirtualMachineInstance{*orig}}
	lcp := list.DeepCopyObject().(*vmletv1.VirtualMachineInstanceList)
	lcp.Items[0].Spec.Hostname = "changed"
	if list.Items[0].Spec.Hostname != "guest" {
		t.Fatalf("changing a list copy changed the original list")
	}
}
