package launcherpod_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// TestHotplugClaimUses: one use per hotpluggable claim or dataVolume volume, in volume order,
// none for volumes attached at boot (which the launcher pod mounts: ClaimUses).
func TestHotplugClaimUses(t *testing.T) {
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "boot", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "c0"}}}},
		{Name: "ro", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "c1", ReadOnly: true}, Hotpluggable: true}}},
		{Name: "dv", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "d1", Hotpluggable: true}}},
		{Name: "again", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "c1"}, Hotpluggable: true}}},
	}
	want := []launcherpod.VolumeClaimUse{
		{Volume: "ro", ClaimUse: launcherpod.ClaimUse{Name: "c1", ReadOnly: true}},
		{Volume: "dv", ClaimUse: launcherpod.ClaimUse{Name: "d1"}},
		{Volume: "again", ClaimUse: launcherpod.ClaimUse{Name: "c1"}},
	}
	if d := cmp.Diff(want, launcherpod.HotplugClaimUses(vmi)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestPodSelector: the caches' selector takes launcher and attachment pods, nothing else.
func TestPodSelector(t *testing.T) {
	sel := launcherpod.PodSelector()
	for app, want := range map[string]bool{launcherpod.AppName: true, launcherpod.AttachmentAppName: true, "nginx": false, "": false} {
		if got := sel.Matches(labels.Set{launcherpod.LabelAppName: app}); got != want {
			t.Errorf("%q: %v, want %v", app, got, want)
		}
	}
}

// TestAttachmentReady: an attachment pod holds its claim once it runs on a node and is not
// being deleted.
func TestAttachmentReady(t *testing.T) {
	pod := func(node string, phase corev1.PodPhase, deleting bool) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			now := metav1.Now()
			p.DeletionTimestamp = &now
		}
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want bool
	}{
		{pod("n1", corev1.PodRunning, false), true},
		{pod("n1", corev1.PodPending, false), false},
		{pod("", corev1.PodRunning, false), false},
		{pod("n1", corev1.PodRunning, true), false},
		{pod("n1", corev1.PodFailed, false), false},
	} {
		if got := launcherpod.AttachmentReady(tc.pod); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.pod.Status, got, tc.want)
		}
	}
}
