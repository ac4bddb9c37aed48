package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

func attachmentsOf(t *testing.T, vmi *vmletv1.VirtualMachineInstance) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(vmi.Namespace), client.MatchingLabels(launcherpod.MatchingAttachments(vmi.UID))); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp.IsZero() {
			live = append(live, p)
		}
	}
	return live
}

// attachedVolumes lists the volumes of the VMI's live attachment pods with their node affinity:
// "volume@node".
func attachedVolumes(t *testing.T, vmi *vmletv1.VirtualMachineInstance) []string {
	var out []string
	for _, p := range attachmentsOf(t, vmi) {
		node := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
		out = append(out, launcherpod.AttachmentVolume(&p)+"@"+node)
	}
	sort.Strings(out)
	return out
}

func hotVolume(name, claim string) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: claim}, Hotpluggable: true}}}
}

// TestAttachmentPods: hotpluggable claim volumes of a VMI whose launcher pod is on a node get one
// attachment pod each, pinned to that node and mounting the claim as the launcher pod would
// (recorded in AnnotClaims for the agent); a claim that does not exist yet is said in an Event
// (KubeVirt's FailedPvcNotFound) and gets one once it is bound; a volume that leaves the spec loses its pod; an attachment pod that ended is made
// again; the VMI's deletion deletes them all. No launcher pod is ever mistaken for one, nor the
// reverse (the VMI keeps one launcher pod).
func TestAttachmentPods(t *testing.T) {
	startController(t)
	ns := namespace(t)
	fs := newPVC(t, ns, "hot-fs", ns+"-hot-fs", corev1.PersistentVolumeFilesystem, corev1.ReadWriteOnce)
	bindClaim(t, fs, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/hot/" + ns}}, "64Mi")
	vmi := newVMI(t, ns, "hot", func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Volumes = append(v.Spec.Volumes, hotVolume("a", "hot-fs"))
	})
	pod := waitPod(t, vmi)
	if got := attachmentsOf(t, vmi); len(got) != 0 {
		t.Fatalf("%d attachment pods before the launcher pod has a node", len(got))
	}
	bind(t, pod, "n1")
	eventually(t, "attachment pod of a on n1", func() (bool, string) {
		got := attachedVolumes(t, vmi)
		return cmp.Equal(got, []string{"a@n1"}), fmt.Sprint(got)
	})
	att := attachmentsOf(t, vmi)[0]
	claims, err := launcherpod.PodClaims(&att)
	if err != nil {
		t.Fatal(err)
	}
	want := []launcherpod.Claim{{ClaimName: "hot-fs", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/hot/" + ns, CapacityBytes: 64 << 20,
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}
	if d := cmp.Diff(want, claims); d != "" {
		t.Errorf("attachment pod claims (-want +got):\n%s", d)
	}
	c := att.Spec.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/mnt/hot/"+ns || strings.Join(c.Command, " ") != launcherpod.Binary+" "+launcherpod.HoldFlag {
		t.Errorf("attachment container mounts %+v, command %v", c.VolumeMounts, c.Command)
	}
	if note := waitEvent(t, vmi, "Normal", "SuccessfulCreate"); note == "" {
		t.Error("no event")
	}

	// A second volume on a claim made later: a pod once it is bound.
	got := getVMI(t, vmi)
	got.Spec.Volumes = append(got.Spec.Volumes, hotVolume("b", "hot-blk"))
	if err := env.Client.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	if note := waitEvent(t, vmi, "Normal", launcherpod.ReasonPVCNotFound); note != "volume b: PVC "+ns+"/hot-blk does not exist, waiting for it to appear" {
		t.Errorf("event note %q", note)
	}
	blk := newPVC(t, ns, "hot-blk", ns+"-hot-blk", corev1.PersistentVolumeBlock, corev1.ReadWriteMany)
	bindClaim(t, blk, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/loop8"}}, "8Mi")
	eventually(t, "attachment pods of a and b", func() (bool, string) {
		got := attachedVolumes(t, vmi)
		return cmp.Equal(got, []string{"a@n1", "b@n1"}), fmt.Sprint(got)
	})

	// An ended attachment pod is made again.
	for _, p := range attachmentsOf(t, vmi) {
		if launcherpod.AttachmentVolume(&p) != "b" {
			continue
		}
		p.Status.Phase = corev1.PodFailed
		if err := env.Client.Status().Update(context.Background(), &p); err != nil {
			t.Fatal(err)
		}
		eventually(t, "b's ended pod replaced", func() (bool, string) {
			var names []string
			for _, q := range attachmentsOf(t, vmi) {
				if launcherpod.AttachmentVolume(&q) == "b" && q.Name != p.Name {
					return true, ""
				}
				names = append(names, q.Name)
			}
			return false, fmt.Sprint(names)
		})
	}

	// a leaves the spec: its pod goes, b's stays.
	got = getVMI(t, vmi)
	got.Spec.Volumes = []vmletv1.Volume{hotVolume("b", "hot-blk")}
	if err := env.Client.Update(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	eventually(t, "only b's attachment pod", func() (bool, string) {
		got := attachedVolumes(t, vmi)
		return cmp.Equal(got, []string{"b@n1"}), fmt.Sprint(got)
	})
	if n := len(podsOf(t, vmi)); n != 1 {
		t.Errorf("%d launcher pods", n)
	}

	if err := env.Client.Delete(context.Background(), getVMI(t, vmi)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "attachment pods deleted with the VMI", func() (bool, string) {
		got := attachedVolumes(t, vmi)
		return len(got) == 0, fmt.Sprint(got)
	})
}
