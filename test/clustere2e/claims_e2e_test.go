package clustere2e_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/guestvmi"
	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/poll"
)

// localPV makes a local PersistentVolume at path (Filesystem or Block) pre-bound to a claim
// of the same name in namespace default, and the claim, and marks both Bound as the PV
// controller would (there is no kube-controller-manager with kubeletsim: test/realcluster has
// the real one).
func localPV(t *testing.T, name, path string, mode corev1.PersistentVolumeMode, size string) {
	t.Helper()
	ctx := context.Background()
	cl := env.Client
	access := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + randomSuffix()}, Spec: corev1.PersistentVolumeSpec{
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}, AccessModes: access, VolumeMode: &mode,
		StorageClassName: "local", PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}}},
		ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: name},
	}}
	if err := cl.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: access, VolumeMode: &mode, VolumeName: pv.Name, StorageClassName: ptrTo("local"),
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
	}}
	if err := cl.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), pvc)
		_ = cl.Delete(context.Background(), pv)
	})
	pv.Status.Phase = corev1.VolumeBound
	if err := cl.Status().Update(ctx, pv); err != nil {
		t.Fatal(err)
	}
	pvc.Status = corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: access,
		Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}
	if err := cl.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
}

// claimVMI is the test guest with a filesystem claim (persistentVolumeClaim) and a block claim
// (dataVolume: the PVC of the same name), each a virtio disk with its serial.
func claimVMI(name string) *vmletv1.VirtualMachineInstance {
	vmi := guestvmi.VMI(name, guestImage)
	vmi.Spec.Volumes = []vmletv1.Volume{
		{Name: "fs", VolumeSource: vmletv1.VolumeSource{PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimSource: vmletv1.PersistentVolumeClaimSource{ClaimName: "fs-claim"}}}},
		{Name: "blk", VolumeSource: vmletv1.VolumeSource{DataVolume: &vmletv1.DataVolumeSource{Name: "blk-claim"}}},
	}
	vmi.Spec.Domain.Devices.Disks = []vmletv1.Disk{{Name: "fs", Serial: "fs"}, {Name: "blk", Serial: "blk"}}
	return vmi
}

// guestExec runs a shell command in the guest through the launcher's guest agent.
func guestExec(t *testing.T, c *launcher.Client, cmd string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	r, err := c.GuestExec(ctx, "/bin/sh", []string{"-c", cmd}, nil, 30*time.Second)
	if err != nil {
		t.Fatalf("guest exec %q: %v", cmd, err)
	}
	if r.GetExitCode() != 0 {
		t.Fatalf("guest exec %q: exit %d: %s%s", cmd, r.GetExitCode(), r.GetStdout(), r.GetStderr())
	}
	return strings.TrimSpace(string(r.GetStdout()))
}

// bootClaimVMI creates the VMI, waits until its guest agent answers and returns the VMI and a
// launcher client, plus the guest's disk names by serial with their sizes in bytes.
func (c *cluster) bootClaimVMI(t *testing.T, name string) (*vmletv1.VirtualMachineInstance, *launcher.Client, map[string]string, map[string]int64) {
	t.Helper()
	vmi := claimVMI(name)
	t0 := time.Now()
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	ready := c.waitVMI(t, client.ObjectKeyFromObject(vmi), 3*time.Minute, "Ready with its guest agent", func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady) &&
			meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected)
	})
	t.Logf("%s: create → Ready with a filesystem and a block claim: %s", name, time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := launcher.Dial(ctx, launcherpod.HostSocket(c.launcherRoot, ready.UID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Close() })
	out := guestExec(t, lc, `for d in /sys/block/vd*; do echo "${d##*/} $(cat $d/serial) $(cat $d/size)"; done`)
	devs, sizes := map[string]string{}, map[string]int64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		devs[f[1]], sizes[f[1]] = f[0], n*512
	}
	return ready, lc, devs, sizes
}

// deleteVMI deletes the VMI and waits until it and its pod are gone.
func (c *cluster) deleteVMI(t *testing.T, vmi *vmletv1.VirtualMachineInstance) {
	t.Helper()
	ctx := context.Background()
	pod := c.launcherPod(t, string(vmi.UID))
	if err := env.Client.Delete(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 2*time.Minute, vmi.Name+" and its pod gone", func() (bool, string) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), &vmletv1.VirtualMachineInstance{})
		perr := env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(perr), fmt.Sprintf("vmi: %v, pod: %v", err, perr)
	})
	for _, p := range []string{launcherpod.HostRunDir(c.launcherRoot, vmi.UID), launcherpod.HostVolumeDir(c.volumeRoot, vmi.UID),
		filepath.Join(c.podCgroups, "pod-"+string(pod.UID))} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after delete: %v", p, err)
		}
	}
}

func fileStarts(t *testing.T, path, prefix string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, len(prefix))
	_, _ = f.Read(b)
	return string(b) == prefix
}

// TestClusterClaims: a VMI with a Filesystem claim (a local PersistentVolume's folder) and a
// Block claim (a loop device as a local PersistentVolume with volumeMode Block) boots in its
// launcher pod: the pod mounts the folder and maps the device at their paths, the agent makes
// disk.img sparse in the empty folder (KubeVirt's size: 64 MiB less 5.5%, 1 MiB aligned) for
// the launcher's user and its device program grants exactly the loop device; the guest sees
// both disks, reads the block device's label, and writes to both. The status records the
// claims and LiveMigratable=False with KubeVirt's ReadWriteOnce reason. After delete +
// recreate on the same claims the guest reads its own writes back; after the last delete the
// node holds nothing of the VMI.
func TestClusterClaims(t *testing.T) {
	c := startCluster(t)
	pvDir := filepath.Join(c.tmp, "pv", "fs")
	if err := os.MkdirAll(pvDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dev := loopdev.Attach(t, filepath.Join(c.tmp, "block.img"), "VMLET-BLOCK-CLAIM", 8<<20)
	localPV(t, "fs-claim", pvDir, corev1.PersistentVolumeFilesystem, "64Mi")
	localPV(t, "blk-claim", dev, corev1.PersistentVolumeBlock, "8Mi")

	vmi, lc, devs, sizes := c.bootClaimVMI(t, "claims")
	if want := map[string]int64{"fs": 60 << 20, "blk": 8 << 20}; sizes["fs"] != want["fs"] || sizes["blk"] != want["blk"] {
		t.Errorf("guest disk sizes %v, want %v", sizes, want)
	}
	pod := c.launcherPod(t, string(vmi.UID))
	if got := pod.Spec.Containers[0].VolumeDevices; len(got) != 1 || got[0].DevicePath != dev {
		t.Errorf("pod volumeDevices %+v, want %s", got, dev)
	}
	img := filepath.Join(pvDir, "disk.img")
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("disk.img: %d bytes, %d allocated, owner %d:%d", st.Size, st.Blocks*512, st.Uid, st.Gid)
	if st.Size != 60<<20 || st.Blocks*512 >= 1<<20 || st.Uid != launcherpod.DefaultRunAsUser {
		t.Errorf("disk.img: size %d, %d bytes allocated, uid %d; want %d sparse, the launcher's", st.Size, st.Blocks*512, st.Uid, 60<<20)
	}
	for _, s := range vmi.Status.VolumeStatus {
		info := s.PersistentVolumeClaimInfo
		if info == nil || len(info.AccessModes) != 1 || info.AccessModes[0] != corev1.ReadWriteOnce {
			t.Errorf("volume %s: claim info %+v", s.Name, info)
		}
	}
	if m := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceIsMigratable); m == nil ||
		m.Status != metav1.ConditionFalse || m.Reason != "DisksNotLiveMigratable" || !strings.Contains(m.Message, "PVC fs-claim is not shared") {
		t.Errorf("LiveMigratable %+v", m)
	}
	if got := guestExec(t, lc, "head -c 17 /dev/"+devs["blk"]); got != "VMLET-BLOCK-CLAIM" {
		t.Errorf("guest reads %q from the block claim", got)
	}
	guestExec(t, lc, fmt.Sprintf("printf VMLET-GUEST-WROTE-FS | dd of=/dev/%s conv=notrunc 2>/dev/null && printf VMLET-GUEST-WROTE-BLK | dd of=/dev/%s conv=notrunc 2>/dev/null && sync",
		devs["fs"], devs["blk"]))
	c.deleteVMI(t, vmi)
	if !fileStarts(t, img, "VMLET-GUEST-WROTE-FS") || !fileStarts(t, filepath.Join(c.tmp, "block.img"), "VMLET-GUEST-WROTE-BLK") {
		t.Fatal("the guest's writes did not reach the claims")
	}

	vmi, lc, devs, _ = c.bootClaimVMI(t, "claims-again")
	for serial, want := range map[string]string{"fs": "VMLET-GUEST-WROTE-FS", "blk": "VMLET-GUEST-WROTE-BLK"} {
		if got := guestExec(t, lc, fmt.Sprintf("head -c %d /dev/%s", len(want), devs[serial])); got != want {
			t.Errorf("recreated VMI reads %q from %s, want %q", got, serial, want)
		}
	}
	c.deleteVMI(t, vmi)
}
