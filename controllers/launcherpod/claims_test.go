package launcherpod_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

func pvcVolume(name, claim string, ro bool) vmletv1.Volume {
	return vmletv1.Volume{Name: name, VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
		PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: claim, ReadOnly: ro}}}}
}

// TestClaimUses: each claim once, in volume order; read-only only when every use is; a
// dataVolume's claim is its name; hotpluggable volumes and other sources are not claims.
func TestClaimUses(t *testing.T) {
	vmi := testVMI(func(v *vmletv1.VirtualMachineInstance) {
		hot := pvcVolume("hot", "hot-claim", false)
		hot.PersistentVolumeClaim.Hotpluggable = true
		v.Spec.Volumes = []vmletv1.Volume{
			{Name: "cd", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "i"}}},
			pvcVolume("root", "disk", false),
			{Name: "dv", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "imported"}}},
			{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
				PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "golden"}}}},
			pvcVolume("golden-ro", "golden", true),
			{Name: "eph2", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
				PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "disk"}}}},
			hot,
		}
	})
	want := []launcherpod.ClaimUse{{Name: "disk"}, {Name: "imported"}, {Name: "golden", ReadOnly: true}}
	if d := cmp.Diff(want, launcherpod.ClaimUses(vmi)); d != "" {
		t.Errorf("ClaimUses (-want +got):\n%s", d)
	}
}

func boundPVC(mode corev1.PersistentVolumeMode, size string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "disk"},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: "pv1", VolumeMode: ptr.To(mode), AccessModes: modes},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: modes,
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}
}

func localPV(path string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}}}}
}

// TestResolveClaim: a bound claim resolves to its volume's path, mode, capacity and access
// modes; every other state is a problem with KubeVirt's reason (or vmlet's PVCNotSupported)
// and a message naming the claim.
func TestResolveClaim(t *testing.T) {
	rwo, rwx := corev1.ReadWriteOnce, corev1.ReadWriteMany
	fs, blk := corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock
	pending := boundPVC(fs, "1Gi")
	pending.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}
	pending.Spec.VolumeName = ""
	noMode := boundPVC(fs, "64Mi", rwx)
	noMode.Spec.VolumeMode = nil
	hostPathPV := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/pv/hp"}}}}
	nfsPV := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs", Path: "/x"}}}}
	cases := []struct {
		name    string
		use     launcherpod.ClaimUse
		pvc     *corev1.PersistentVolumeClaim
		pv      *corev1.PersistentVolume
		want    launcherpod.Claim
		problem *launcherpod.ClaimProblem
	}{
		{"local filesystem", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi", rwo), localPV("/mnt/disks/pv1"),
			launcherpod.Claim{ClaimName: "disk", Mode: fs, Path: "/mnt/disks/pv1", CapacityBytes: 1 << 30, AccessModes: []corev1.PersistentVolumeAccessMode{rwo}}, nil},
		{"hostPath, no volumeMode means Filesystem", launcherpod.ClaimUse{Name: "disk"}, noMode, hostPathPV,
			launcherpod.Claim{ClaimName: "disk", Mode: fs, Path: "/srv/pv/hp", CapacityBytes: 64 << 20, AccessModes: []corev1.PersistentVolumeAccessMode{rwx}}, nil},
		{"local block, read-only", launcherpod.ClaimUse{Name: "disk", ReadOnly: true}, boundPVC(blk, "8Mi", rwo), localPV("/dev/loop7"),
			launcherpod.Claim{ClaimName: "disk", Mode: blk, Path: "/dev/loop7", CapacityBytes: 8 << 20, AccessModes: []corev1.PersistentVolumeAccessMode{rwo}, ReadOnly: true}, nil},
		{"missing", launcherpod.ClaimUse{Name: "disk"}, nil, nil, launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "FailedPvcNotFound", Message: "PVC ns1/disk does not exist, waiting for it to appear"}},
		{"pending", launcherpod.ClaimUse{Name: "disk"}, pending, nil, launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotReady", Message: "PVC ns1/disk is Pending, waiting for it to be bound"}},
		{"bound to a missing PV", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi"), nil, launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotReady", Message: "PVC ns1/disk is bound to PersistentVolume pv1, which does not exist"}},
		{"nfs", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi"), nfsPV, launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: "PVC ns1/disk (PersistentVolume pv1): vmlet mounts local and hostPath PersistentVolumes only (Block: local only)"}},
		{"block claim on a folder", launcherpod.ClaimUse{Name: "disk"}, boundPVC(blk, "1Gi"), localPV("/mnt/disks/pv1"), launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: `PVC ns1/disk (PersistentVolume pv1): a Block volume's device "/mnt/disks/pv1" is not beneath /dev`}},
		{"over the volume root", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi"), localPV("/var/lib/vmlet"), launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: "PVC ns1/disk (PersistentVolume pv1): its folder /var/lib/vmlet overlaps /var/lib/vmlet/volumes, which the launcher pod mounts or needs"}},
		{"under /dev", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi"), localPV("/dev/shm/x"), launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: "PVC ns1/disk (PersistentVolume pv1): its folder /dev/shm/x overlaps /dev, which the launcher pod mounts or needs"}},
		{"unclean path", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "1Gi"), localPV("/mnt/../etc"), launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: `PVC ns1/disk (PersistentVolume pv1): path "/mnt/../etc" is not an absolute clean path`}},
		{"too small", launcherpod.ClaimUse{Name: "disk"}, boundPVC(fs, "4Ki"), localPV("/mnt/disks/pv1"), launcherpod.Claim{},
			&launcherpod.ClaimProblem{Reason: "PVCNotSupported", Message: "PVC ns1/disk (PersistentVolume pv1): capacity 4096 bytes is too small for a disk image (at least 2097152)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, problem := launcherpod.ResolveClaim(c.use, "ns1", c.pvc, c.pv, launcherpod.Options{})
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("claim (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.problem, problem); d != "" {
				t.Errorf("problem (-want +got):\n%s", d)
			}
		})
	}
}

// TestBuildClaims: a Filesystem claim is a volume mounted at its path (read-only when only
// read), a Block claim a volume device at its device path, and the annotation records both
// for the agent (PodClaims reads back what Build was given).
func TestBuildClaims(t *testing.T) {
	claims := []launcherpod.Claim{
		{ClaimName: "disk", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/disks/pv1", CapacityBytes: 1 << 30,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}},
		{ClaimName: "fast", Mode: corev1.PersistentVolumeBlock, Path: "/dev/loop7", CapacityBytes: 8 << 20},
		{ClaimName: "golden", Mode: corev1.PersistentVolumeFilesystem, Path: "/mnt/disks/pv2", CapacityBytes: 1 << 20, ReadOnly: true},
	}
	plain, err := launcherpod.Build(testVMI(nil), opts(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := launcherpod.Build(testVMI(nil), opts(nil), claims)
	if err != nil {
		t.Fatal(err)
	}
	wantVols := append(plain.Spec.Volumes,
		corev1.Volume{Name: "claim-0", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"}}},
		corev1.Volume{Name: "claim-1", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "fast"}}},
		corev1.Volume{Name: "claim-2", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "golden", ReadOnly: true}}},
	)
	if d := cmp.Diff(wantVols, pod.Spec.Volumes); d != "" {
		t.Errorf("volumes (-want +got):\n%s", d)
	}
	ctr, plainCtr := pod.Spec.Containers[0], plain.Spec.Containers[0]
	wantMounts := append(plainCtr.VolumeMounts,
		corev1.VolumeMount{Name: "claim-0", MountPath: "/mnt/disks/pv1"},
		corev1.VolumeMount{Name: "claim-2", MountPath: "/mnt/disks/pv2", ReadOnly: true})
	if d := cmp.Diff(wantMounts, ctr.VolumeMounts); d != "" {
		t.Errorf("mounts (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]corev1.VolumeDevice{{Name: "claim-1", DevicePath: "/dev/loop7"}}, ctr.VolumeDevices); d != "" {
		t.Errorf("devices (-want +got):\n%s", d)
	}
	wantAnnot := `[{"claimName":"disk","volumeMode":"Filesystem","path":"/mnt/disks/pv1","capacityBytes":1073741824,"accessModes":["ReadWriteOnce"]},` +
		`{"claimName":"fast","volumeMode":"Block","path":"/dev/loop7","capacityBytes":8388608},` +
		`{"claimName":"golden","volumeMode":"Filesystem","path":"/mnt/disks/pv2","capacityBytes":1048576,"readOnly":true}]`
	if got := pod.Annotations[launcherpod.AnnotClaims]; got != wantAnnot {
		t.Errorf("annotation %s:\n got %s\nwant %s", launcherpod.AnnotClaims, got, wantAnnot)
	}
	back, err := launcherpod.PodClaims(pod)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(claims, back); d != "" {
		t.Errorf("PodClaims (-built +read):\n%s", d)
	}
	// Only the claims differ: the rest of the pod is the claimless one.
	pod.Spec.Volumes, ctr.VolumeMounts, ctr.VolumeDevices = plain.Spec.Volumes, plainCtr.VolumeMounts, nil
	pod.Spec.Containers = []corev1.Container{ctr}
	delete(pod.Annotations, launcherpod.AnnotClaims)
	if d := cmp.Diff(plain, pod); d != "" {
		t.Errorf("pod beyond its claims (-claimless +with claims):\n%s", d)
	}
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{launcherpod.AnnotClaims: "{"}}}
	if _, err := launcherpod.PodClaims(bad); err == nil {
		t.Error("PodClaims of a corrupt annotation: no error")
	}
}
