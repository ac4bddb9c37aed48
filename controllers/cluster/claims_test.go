package cluster_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

func syncReason(v *vmletv1.VirtualMachineInstance) string {
	if c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c != nil && c.Status == metav1.ConditionFalse {
		return c.Reason
	}
	return ""
}

// bindClaim plays the PV controller: it makes a PersistentVolume for the claim and marks the
// claim Bound to it (there is no kube-controller-manager in this package).
func bindClaim(t *testing.T, pvc *corev1.PersistentVolumeClaim, src corev1.PersistentVolumeSource, size string) {
	t.Helper()
	ctx := context.Background()
	mode := ptr.Deref(pvc.Spec.VolumeMode, corev1.PersistentVolumeFilesystem)
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvc.Spec.VolumeName}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}, AccessModes: pvc.Spec.AccessModes,
		VolumeMode: &mode, PersistentVolumeSource: src, StorageClassName: "manual",
		ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name},
	}}
	if src.Local != nil {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}}}}
	}
	if err := env.Client.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pv) })
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: pvc.Spec.AccessModes,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}
	if err := env.Client.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

func newPVC(t *testing.T, ns, name, pv string, mode corev1.PersistentVolumeMode, access corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	t.Helper()
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{access}, VolumeMode: &mode, VolumeName: pv, StorageClassName: ptr.To("manual"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
	}}
	if err := env.Client.Create(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	return pvc
}

// TestClaimsWaitThenMount: a VMI whose claims are missing waits Pending (FailedPvcNotFound,
// with KubeVirt's message and a Normal Event) and gets no pod; a claim that appears unbound
// keeps it waiting (PVCNotReady); once the PVC (filesystem, a local PV) and the dataVolume's
// PVC (block, a local PV) are bound, the pod mounts the first at its folder and the second as
// a device at its path, and records both for the agent; the wait's condition is gone.
func TestClaimsWaitThenMount(t *testing.T) {
	startController(t)
	ns := namespace(t)
	vmi := newVMI(t, ns, "claims", func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Volumes = []vmletv1.Volume{
			{Name: "root", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "root-disk"}}}},
			{Name: "data", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "data-dv"}}},
		}
	})
	got := waitVMI(t, vmi, "waiting for its PVC", func(v *vmletv1.VirtualMachineInstance) bool {
		return syncReason(v) == launcherpod.ReasonPVCNotFound
	})
	if got.Status.Phase != vmletv1.Pending {
		t.Errorf("phase %s while the PVC is missing, want Pending", got.Status.Phase)
	}
	if note := waitEvent(t, vmi, "Normal", launcherpod.ReasonPVCNotFound); note != "PVC "+ns+"/root-disk does not exist, waiting for it to appear" {
		t.Errorf("event note %q", note)
	}
	if pods := podsOf(t, vmi); len(pods) != 0 {
		t.Fatalf("%d launcher pods while the PVC is missing", len(pods))
	}
	root := newPVC(t, ns, "root-disk", ns+"-root", corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce)
	waitVMI(t, vmi, "waiting for the PVC to bind", func(v *vmletv1.VirtualMachineInstance) bool {
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Reason == launcherpod.ReasonPVCNotReady && c.Message == "PVC "+ns+"/root-disk is Pending, waiting for it to be bound"
	})
	bindClaim(t, root, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/pv/" + ns}}, "2Gi")
	waitVMI(t, vmi, "waiting for the dataVolume's PVC", func(v *vmletv1.VirtualMachineInstance) bool {
		c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		return c != nil && c.Reason == launcherpod.ReasonPVCNotFound && c.Message == "PVC "+ns+"/data-dv does not exist, waiting for it to appear"
	})
	data := newPVC(t, ns, "data-dv", ns+"-data", corev1.PersistentVolumeBlock, corev1.ReadWriteMany)
	bindClaim(t, data, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/loop9"}}, "8Mi")

	pod := waitPod(t, vmi)
	want := []launcherpod.Claim{
		{ClaimName: "root-disk", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/pv/" + ns, CapacityBytes: 2 << 30,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{ClaimName: "data-dv", Mode: corev1.PersistentVolumeBlock, Path: "/dev/loop9", CapacityBytes: 8 << 20,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}},
	}
	claims, err := launcherpod.PodClaims(pod)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, claims); d != "" {
		t.Errorf("pod claims (-want +got):\n%s", d)
	}
	c := pod.Spec.Containers[0]
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["claim-0"] != "/mnt/pv/"+ns {
		t.Errorf("mounts %v", mounts)
	}
	if d := cmp.Diff([]corev1.VolumeDevice{{Name: "claim-1", DevicePath: "/dev/loop9"}}, c.VolumeDevices); d != "" {
		t.Errorf("volume devices (-want +got):\n%s", d)
	}
	got = waitVMI(t, vmi, "Scheduling", func(v *vmletv1.VirtualMachineInstance) bool { return v.Status.Phase == vmletv1.Scheduling })
	if r := syncReason(got); r != "" {
		t.Errorf("Synchronized=False (%s) after the claims resolved", r)
	}
}

// TestClaimNotSupported: a claim bound to a volume vmlet cannot mount (NFS) keeps the VMI
// Pending with PVCNotSupported and a Warning Event naming the volume; no pod is made.
func TestClaimNotSupported(t *testing.T) {
	startController(t)
	ns := namespace(t)
	pvc := newPVC(t, ns, "remote", ns+"-nfs", corev1.PersistentVolumeFilesystem, corev1.ReadWriteMany)
	bindClaim(t, pvc, corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/export"}}, "1Gi")
	vmi := newVMI(t, ns, "nfs", func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Volumes = []vmletv1.Volume{{Name: "root", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "remote"}}}}}
	})
	got := waitVMI(t, vmi, "PVCNotSupported", func(v *vmletv1.VirtualMachineInstance) bool {
		return syncReason(v) == launcherpod.ReasonPVCNotSupported
	})
	note := waitEvent(t, vmi, "Warning", launcherpod.ReasonPVCNotSupported)
	if wantNote := "PVC " + ns + "/remote (PersistentVolume " + ns + "-nfs): vmlet mounts local and hostPath PersistentVolumes only (Block: local only)"; note != wantNote {
		t.Errorf("event note %q, want %q", note, wantNote)
	}
	if got.Status.Phase != vmletv1.Pending || len(podsOf(t, vmi)) != 0 {
		t.Errorf("phase %s, %d pods; want Pending and none", got.Status.Phase, len(podsOf(t, vmi)))
	}
}
