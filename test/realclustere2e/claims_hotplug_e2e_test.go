package realclustere2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/test/loopdev"
	"github.com/vmlet/vmlet/test/poll"
)

// attachmentPods lists the VMI's attachment pods.
func attachmentPods(t testing.TB, vmi *vmletv1.VirtualMachineInstance) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := kc.List(context.Background(), &l, client.InNamespace(vmi.Namespace), client.MatchingLabels(launcherpod.MatchingAttachments(vmi.UID))); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func volumeStatus(vmi *vmletv1.VirtualMachineInstance, name string) *vmletv1.VolumeStatus {
	for i := range vmi.Status.VolumeStatus {
		if vmi.Status.VolumeStatus[i].Name == name {
			return &vmi.Status.VolumeStatus[i]
		}
	}
	return nil
}

// TestHotplugClaims: on the real kubelet, claims hot-plugged into a running VMI (KubeVirt's
// hotplug: volumes with `hotpluggable: true` patched into spec.volumes) reach the guest: a
// Filesystem claim (a local PV folder on the VMI's node: the agent makes disk.img in it) and a
// Block claim (a loop device, ReadWriteMany on both nodes), each held on the VMI's node by an
// attachment pod the controller makes, opened by the agent and handed to the launcher (whose
// container has neither path). The guest reads the block claim's bytes and writes to both; a
// claim whose local volume is on the other node stays Pending (AttachmentPodPending; its
// attachment pod unschedulable, with the scheduler's words). The ReadWriteOnce claim makes the
// VMI not live-migratable while attached; the block claim's attachment pod deleted (as a drain
// evicts it) is made again while the guest keeps the disk; once it and the far one are unplugged (their disks
// leave the guest, their pods go, the guest's write is in disk.img) the VMI migrates to the
// other kubelet with the block claim: the target's launcher pod mounts it, the guest reads its
// earlier write there and writes again, the source's attachment pod goes and none is made for
// the target. Unplugged there, then the VMI deleted: nothing is left on either node.
func TestHotplugClaims(t *testing.T) {
	need(t)
	if len(cl.Nodes) < 2 {
		t.Fatalf("this test needs the cluster's two nodes, have %d", len(cl.Nodes))
	}
	name := "hotclaims-" + suffix()
	createVMI(t, name, strings.Replace(migratableSpec, "    devices:\n", "    devices:\n      disks:\n      - {name: root, disk: {}}\n", 1))
	vmi := waitBooted(t, name)
	fp := nodeFootprint(t, vmi, launcherPod(t, vmi))
	here := vmi.Status.NodeName
	var nodes []string
	other := ""
	for _, n := range cl.Nodes {
		nodes = append(nodes, n.Name)
		if n.Name != here {
			other = n.Name
		}
	}
	migratable := func(want metav1.ConditionStatus) *metav1.Condition {
		v := waitVMI(t, name, time.Minute, "LiveMigratable "+string(want), func(v *vmletv1.VirtualMachineInstance) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, string(vmletv1.VirtualMachineInstanceIsMigratable))
			return c != nil && c.Status == want
		})
		return meta.FindStatusCondition(v.Status.Conditions, string(vmletv1.VirtualMachineInstanceIsMigratable))
	}
	migratable(metav1.ConditionTrue)

	// The claims: a folder on the VMI's node (below the agent's hostPath, which it sees; the
	// test reaches it through the node's host folder), a loop device both nodes reach, and one
	// only the other node has.
	pvDir := filepath.Join(nodeState, "pv-"+name)
	pvHost := node(t, here).HostPath(pvDir)
	if err := os.MkdirAll(pvHost, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(pvHost) })
	dev := loopdev.Attach(t, filepath.Join(t.TempDir(), "block.img"), "VMLET-HOT-BLOCK", 8<<20)
	claimPVOn(t, name+"-fs", pvDir, corev1.PersistentVolumeFilesystem, "64Mi", corev1.ReadWriteOnce, here)
	claimPVOn(t, name+"-blk", dev, corev1.PersistentVolumeBlock, "8Mi", corev1.ReadWriteMany, nodes...)
	far := loopdev.Attach(t, filepath.Join(t.TempDir(), "far.img"), "VMLET-FAR-BLOCK", 8<<20)
	claimPVOn(t, name+"-far", far, corev1.PersistentVolumeBlock, "8Mi", corev1.ReadWriteOnce, other)
	devOf := func(v *vmletv1.VirtualMachineInstance, serial string) string {
		return guestShell(t, v, `for d in /sys/block/vd*; do [ "$(cat $d/serial)" = `+serial+` ] && echo ${d##*/}; done; true`)
	}

	t0 := time.Now()
	kubectl(t, "", "patch", "vmi", name, "--type", "json", "-p", `[
 {"op":"add","path":"/spec/volumes/-","value":{"name":"hotfs","persistentVolumeClaim":{"claimName":"`+name+`-fs","hotpluggable":true}}},
 {"op":"add","path":"/spec/volumes/-","value":{"name":"hotblk","persistentVolumeClaim":{"claimName":"`+name+`-blk","hotpluggable":true}}},
 {"op":"add","path":"/spec/volumes/-","value":{"name":"hotfar","persistentVolumeClaim":{"claimName":"`+name+`-far","hotpluggable":true}}},
 {"op":"add","path":"/spec/domain/devices/disks/-","value":{"name":"hotfs","serial":"hotfs","disk":{}}},
 {"op":"add","path":"/spec/domain/devices/disks/-","value":{"name":"hotblk","serial":"hotblk","disk":{}}},
 {"op":"add","path":"/spec/domain/devices/disks/-","value":{"name":"hotfar","serial":"hotfar","disk":{}}}]`)
	vmi = waitVMI(t, name, 3*time.Minute, "hotfs and hotblk Ready, hotfar waiting for its attachment pod", func(v *vmletv1.VirtualMachineInstance) bool {
		fs, blk, far := volumeStatus(v, "hotfs"), volumeStatus(v, "hotblk"), volumeStatus(v, "hotfar")
		return fs != nil && fs.Phase == vmletv1.VolumeReady && blk != nil && blk.Phase == vmletv1.VolumeReady &&
			far != nil && far.Phase == vmletv1.VolumePending && far.Reason == "AttachmentPodPending"
	})
	t.Logf("patch → two claims attached in %s; hotfar: %s", time.Since(t0).Round(time.Millisecond), volumeStatus(vmi, "hotfar").Message)
	if msg := volumeStatus(vmi, "hotfar").Message; !strings.Contains(msg, launcherpod.LabelAttachmentFor) {
		t.Errorf("hotfar's message does not say how to find its attachment pod: %q", msg)
	}
	if info := volumeStatus(vmi, "hotblk").PersistentVolumeClaimInfo; info == nil || info.ClaimName != name+"-blk" {
		t.Errorf("hotblk's claim info %+v", info)
	}

	// Attachment pods: two run on the VMI's node; the far one cannot be scheduled there.
	byVolume := map[string]corev1.Pod{}
	for _, p := range attachmentPods(t, vmi) {
		byVolume[p.Annotations[launcherpod.AnnotVolume]] = p
	}
	for _, v := range []string{"hotfs", "hotblk"} {
		if p, ok := byVolume[v]; !ok || p.Spec.NodeName != here || p.Status.Phase != corev1.PodRunning {
			t.Errorf("attachment pod of %s: %s on %q, %s", v, p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	if p, ok := byVolume["hotfar"]; !ok {
		t.Errorf("no attachment pod for hotfar")
	} else {
		poll.Until(t, time.Minute, "hotfar's attachment pod unschedulable", func() (bool, string) {
			if err := kc.Get(context.Background(), client.ObjectKeyFromObject(&p), &p); err != nil {
				return false, err.Error()
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					return true, c.Message
				}
			}
			return false, fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.Conditions)
		})
	}

	// The guest has the disks: it reads the block claim's bytes and writes to both.
	blk, fs := devOf(vmi, "hotblk"), devOf(vmi, "hotfs")
	if blk == "" || fs == "" {
		t.Fatalf("the guest has no disk with serial hotblk (%q) or hotfs (%q)", blk, fs)
	}
	if devOf(vmi, "hotfar") != "" {
		t.Errorf("the guest has hotfar, whose claim is on node %s", other)
	}
	if got := guestShell(t, vmi, "head -c 15 /dev/"+blk); got != "VMLET-HOT-BLOCK" {
		t.Errorf("guest reads %q from the hot-plugged block claim", got)
	}
	guestShell(t, vmi, fmt.Sprintf("printf VMLET-HOT-WROTE-FS | dd of=/dev/%s conv=notrunc oflag=direct 2>/dev/null && printf VMLET-HOT-WROTE-BK | dd of=/dev/%s bs=512 seek=1 conv=notrunc oflag=direct 2>/dev/null && sync", fs, blk))
	// hotblk's attachment pod deleted (as a drain would evict it): the guest keeps the disk
	// (QEMU holds its files), the controller makes the pod again, the volume stays Ready.
	old := byVolume["hotblk"]
	kubectl(t, "", "delete", "pod", old.Name, "-n", old.Namespace, "--wait")
	poll.Until(t, 2*time.Minute, "hotblk's attachment pod made again and running", func() (bool, string) {
		for _, p := range attachmentPods(t, vmi) {
			if p.Annotations[launcherpod.AnnotVolume] == "hotblk" && p.Name != old.Name && p.Status.Phase == corev1.PodRunning {
				return true, ""
			}
		}
		return false, "not yet"
	})
	if s := volumeStatus(getVMI(t, name), "hotblk"); s == nil || s.Phase != vmletv1.VolumeReady {
		t.Errorf("hotblk after its attachment pod was replaced: %+v", s)
	}
	if got := guestShell(t, vmi, "head -c 15 /dev/"+blk); got != "VMLET-HOT-BLOCK" || devOf(vmi, "hotblk") != blk {
		t.Errorf("after its attachment pod was replaced the guest reads %q from hotblk (now %q, was %q)", got, devOf(vmi, "hotblk"), blk)
	}
	if out := kubectl(t, "", "get", "events", "-n", "default", "--field-selector", "involvedObject.name="+name+",reason=VolumeDetached", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("a disk was detached when the attachment pod went: %s", out)
	}
	if c := migratable(metav1.ConditionFalse); c.Reason != "DisksNotLiveMigratable" || !strings.Contains(c.Message, name+"-fs") {
		t.Errorf("LiveMigratable with the ReadWriteOnce claim attached: %s: %s", c.Reason, c.Message)
	}

	// Unplug hotfs and hotfar: their disks leave the guest, their pods go.
	setVolumes := func(extra ...string) {
		vols := []string{`{"name":"root","containerDisk":{"image":"` + diskImage + `"}}`}
		disks := []string{`{"name":"root","disk":{}}`}
		for _, v := range extra {
			vols = append(vols, `{"name":"`+v+`","persistentVolumeClaim":{"claimName":"`+name+`-blk","hotpluggable":true}}`)
			disks = append(disks, `{"name":"`+v+`","serial":"`+v+`","disk":{}}`)
		}
		kubectl(t, "", "patch", "vmi", name, "--type", "json", "-p", `[
 {"op":"replace","path":"/spec/volumes","value":[`+strings.Join(vols, ",")+`]},
 {"op":"replace","path":"/spec/domain/devices/disks","value":[`+strings.Join(disks, ",")+`]}]`)
	}
	setVolumes("hotblk")
	poll.Until(t, 2*time.Minute, "hotfs gone from the guest, only hotblk's attachment pod left", func() (bool, string) {
		var left []string
		if devOf(vmi, "hotfs") != "" {
			left = append(left, "guest disk hotfs")
		}
		for _, p := range attachmentPods(t, vmi) {
			if v := p.Annotations[launcherpod.AnnotVolume]; v != "hotblk" {
				left = append(left, "pod "+p.Name+" of "+v)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	if img, err := os.ReadFile(filepath.Join(pvHost, "disk.img")); err != nil || !bytes.HasPrefix(img, []byte("VMLET-HOT-WROTE-FS")) {
		t.Errorf("the Filesystem claim's disk.img does not start with the guest's write (%v)", err)
	}
	migratable(metav1.ConditionTrue)

	// Migrate with the block claim plugged: the target's launcher pod mounts it.
	sourcePod := getVMI(t, name).Status.Launcher.Pod
	m := createMigration(t, name+"-m", name)
	poll.Until(t, 4*time.Minute, m.Name+" Succeeded", func() (bool, string) {
		if err := kc.Get(context.Background(), client.ObjectKeyFromObject(m), m); err != nil {
			return false, err.Error()
		}
		if m.Status.Phase == vmletv1.MigrationFailed {
			t.Fatalf("%s failed: %+v", m.Name, m.Status.MigrationState)
		}
		return m.Status.Phase == vmletv1.MigrationSucceeded, string(m.Status.Phase)
	})
	there := waitVMI(t, name, time.Minute, "on the other node with its new pod", func(v *vmletv1.VirtualMachineInstance) bool {
		return v.Status.NodeName == other && v.Status.Launcher != nil && v.Status.Launcher.Pod != sourcePod &&
			conditionTrue(v, string(vmletv1.VirtualMachineInstanceReady))
	})
	if s := volumeStatus(there, "hotblk"); s == nil || s.Phase != vmletv1.VolumeReady {
		t.Errorf("hotblk after the migration: %+v", s)
	}
	target := launcherPodNamed(t, there.Status.Launcher.Pod)
	fpThere := nodeFootprint(t, there, target)
	if claims, err := launcherpod.PodClaims(target); err != nil || !slices.ContainsFunc(claims, func(c launcherpod.Claim) bool { return c.ClaimName == name+"-blk" }) {
		t.Errorf("the target's launcher pod %s does not mount the hot-plugged claim: %+v (%v)", target.Name, claims, err)
	}
	blk = devOf(there, "hotblk")
	guestShell(t, there, "echo 3 > /proc/sys/vm/drop_caches")
	if got := guestShell(t, there, "dd if=/dev/"+blk+" bs=512 skip=1 count=1 2>/dev/null | head -c 18"); got != "VMLET-HOT-WROTE-BK" {
		t.Errorf("after the migration the guest reads %q at its write", got)
	}
	guestShell(t, there, "printf VMLET-HOT-AFTER-MG | dd of=/dev/"+blk+" bs=512 seek=2 conv=notrunc oflag=direct 2>/dev/null && sync")
	poll.Until(t, time.Minute, "no attachment pod left (the target's launcher pod holds the claim)", func() (bool, string) {
		var left []string
		for _, p := range attachmentPods(t, there) {
			left = append(left, p.Name+" on "+p.Spec.NodeName)
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	b, err := os.ReadFile(dev)
	if err != nil || !bytes.Equal(b[512:530], []byte("VMLET-HOT-WROTE-BK")) || !bytes.Equal(b[1024:1042], []byte("VMLET-HOT-AFTER-MG")) {
		t.Errorf("the block claim does not hold the guest's writes before and after the migration (%v)", err)
	}

	// Unplugged on the target, then deleted: nothing left on either node.
	setVolumes()
	poll.Until(t, 2*time.Minute, "hotblk gone from the guest on the target", func() (bool, string) {
		return devOf(there, "hotblk") == "", "still there"
	})
	deleteVMI(t, name)
	assertGone(t, fp)
	assertGone(t, fpThere)
}
