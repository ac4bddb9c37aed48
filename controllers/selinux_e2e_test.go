package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/selinuxlabel"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestSELinuxLabels: with labelling forced on (--selinux-relabel=always: this host's SELinux is
// disabled), a real agent and QEMU run a VMI whose every file the launcher opens carries the
// planned security.selinux label, read back with getxattr: its storage folder, overlays, empty
// disk and cloud-init ISO, its run folder and sockets, its hostDisk and claim at the launcher's
// level (status.selinuxContext), the containerDisk base QEMU has open and the kernel links at
// the shared s0 label; a hotplugged claim before QEMU opens it. After deletion the host files have their labels from before (the
// hostDisk's back, the claim's removed), the VMI's folders are gone, shared content keeps its
// label, and the agent never made a process-label call (the kernel would refuse them).
func TestSELinuxLabels(t *testing.T) {
	prereq.Root(t) // security.* xattrs need CAP_SYS_ADMIN
	prereq.QEMU(t)
	files := testguest.Assets(t)
	img, err := images.ContainerDisk(files.DataDisk)
	if err != nil {
		t.Fatal(err)
	}
	dataRef, err := images.WriteLayout(filepath.Join(t.TempDir(), "data"), img, "test")
	if err != nil {
		t.Fatal(err)
	}
	hostRoot, claimDir := nodeDir(t), nodeDir(t)
	hostDisk := filepath.Join(hostRoot, "disk.img")
	if err := os.WriteFile(hostDisk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(hostDisk, 16<<20); err != nil {
		t.Fatal(err)
	}
	const hostBefore = "system_u:object_r:default_t:s0"
	if err := unix.Lsetxattr(hostDisk, selinuxlabel.XattrName, []byte(hostBefore), 0); err != nil {
		t.Fatal(err)
	}
	claim := filepath.Join(writeClaim(t, filepath.Join(claimDir, "data"), "VMLET-SELINUX-CLAIM", 8<<20), storage.ClaimImage)
	hot := filepath.Join(writeClaim(t, filepath.Join(claimDir, "hot"), "VMLET-SELINUX-HOT", 8<<20), storage.ClaimImage)
	// Disabled here. On an SELinux host the same test runs the launcher confined (its exec
	// label set) and checks the labels at the level the kernel reports for it.
	state := selinuxlabel.Probe()
	a := startAgent(t, agentOptions{
		ImageSources: map[string]string{"vmlet.dev/selinux-data:v1": dataRef},
		HostDiskRoot: hostRoot,
		Claims:       map[string]storage.Claim{"se-claim": {Path: filepath.Dir(claim)}, "se-hot": {Path: filepath.Dir(hot)}},
		SELinux:      &controllers.NodeSELinux{State: state, Relabel: controllers.RelabelAlways},
	})
	defer a.stop(t)
	calls := selinuxlabel.ProcessCalls()
	ctx := context.Background()

	vmi := newVMI("selinux")
	vmi.Spec.Volumes = append(vmi.Spec.Volumes,
		vmletv1.Volume{Name: "containerdisk", VolumeSource: vmletv1.VolumeSource{ContainerDisk: &vmletv1.ContainerDiskSource{Image: "vmlet.dev/selinux-data:v1"}}},
		vmletv1.Volume{Name: "scratch", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}},
		vmletv1.Volume{Name: "host", VolumeSource: vmletv1.VolumeSource{HostDisk: &vmletv1.HostDisk{Path: hostDisk, Type: vmletv1.HostDiskExists}}},
		claimVolume("pvc", "se-claim", false),
		vmletv1.Volume{Name: "cloudinit", VolumeSource: vmletv1.VolumeSource{CloudInitNoCloud: &vmletv1.CloudInitNoCloudSource{
			CloudInitData: vmletv1.CloudInitData{UserData: "#cloud-config\n"}}}},
	)
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	uid := string(vmi.UID)
	running := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, 2*time.Minute)
	lc, err := selinuxlabel.ParseContext(running.Status.SelinuxContext)
	if err != nil {
		t.Fatalf("status.selinuxContext %q: %v", running.Status.SelinuxContext, err)
	}
	if lc.Type != selinuxlabel.DefaultProcessType || !strings.HasPrefix(lc.Level, "s0:c") {
		t.Errorf("launcher context %s: want %s at a level with categories", lc, selinuxlabel.DefaultProcessType)
	}
	own := "system_u:object_r:container_file_t:" + lc.Level
	const shared = "system_u:object_r:container_ro_file_t:s0"

	// What QEMU has open, from QEMU itself: the containerDisk's base in the image cache.
	blocks := queryBlock(t, launcherClient(t, a, running))
	var base string
	for _, b := range blocks {
		if bi := b.Inserted.Image.BackingImage; bi != nil && strings.HasPrefix(bi.Filename, imageCache) {
			base = bi.Filename
		}
	}
	if base == "" {
		t.Fatalf("no disk of QEMU's reads a base in the image cache %s: %+v", imageCache, blocks)
	}
	vdir, rdir := filepath.Join(volumeRoot, uid), filepath.Join(runRoot, uid)
	want := map[string]string{
		vdir: own, vdir + "/disks": own, vdir + "/boot": own,
		vdir + "/disks/containerdisk.qcow2": own, vdir + "/disks/scratch.qcow2": own, vdir + "/disks/cloudinit.iso": own,
		vdir + "/boot/kernel": shared, vdir + "/boot/initrd": shared, base: shared,
		hostDisk: own, claim: own,
		rdir: own,
	}
	ents, err := os.ReadDir(rdir)
	if err != nil {
		t.Fatal(err)
	}
	sockets := 0
	for _, e := range ents {
		want[filepath.Join(rdir, e.Name())] = own
		if e.Type()&os.ModeSocket != 0 {
			sockets++
		}
	}
	if sockets == 0 {
		t.Errorf("run folder %s holds no socket: %v", rdir, ents)
	}
	for p, w := range want {
		got, ok, err := selinuxlabel.FileLabel(p)
		if err != nil || !ok || got != w {
			t.Errorf("%s: security.selinux %q (set %v, %v), want %q", p, got, ok, err, w)
		}
	}

	// A hotplugged volume is labelled before QEMU opens it.
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume("hot", "se-hot", true))
	})
	waitVolumes(t, key, vmletv1.VolumeReady, "hot")
	if got, ok, err := selinuxlabel.FileLabel(hot); err != nil || !ok || got != own {
		t.Errorf("hotplugged claim %s: security.selinux %q (set %v, %v), want %q", hot, got, ok, err, own)
	}

	if err := env.Client.Delete(ctx, running); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "VMI deleted", func() (bool, string) {
		_, err := getVMI(t, key)
		return err != nil, "still there"
	})
	assertNothingLeft(t, uid, int(running.Status.Launcher.PID))
	if got, _, err := selinuxlabel.FileLabel(hostDisk); err != nil || got != hostBefore {
		t.Errorf("hostDisk label after deletion %q (%v), want its previous %q", got, err, hostBefore)
	}
	for _, p := range []string{claim, hot} {
		if got, ok, err := selinuxlabel.FileLabel(p); err != nil || ok {
			t.Errorf("claim image %s label after deletion %q (set %v, %v), want none as before", p, got, ok, err)
		}
	}
	if got, _, _ := selinuxlabel.FileLabel(base); got != shared {
		t.Errorf("shared base label after deletion %q, want %q kept for the other VMs", got, shared)
	}
	switch n := selinuxlabel.ProcessCalls() - calls; {
	case !state.Enabled && n != 0:
		t.Errorf("%d process-label calls on a host whose SELinux is disabled", n)
	case state.Enabled && n == 0:
		t.Error("no process-label call on an SELinux host: the launcher ran with the agent's label")
	}
}
