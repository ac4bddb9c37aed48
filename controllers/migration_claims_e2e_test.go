package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationsv1 "github.com/vmlet/vmlet/api/migrations/v1alpha1"
	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestMigrateClaimsAndHotplug migrates, between two nodes sharing their claims as local mode's
// nodes do (one machine), a guest with a claim disk, an ephemeral disk over a claim and a claim
// disk hot-plugged into the running guest: the target's QEMU starts with the hot-plugged disk
// on its source port, the guest's writes to all three are there after the migration (read past
// the guest's page cache), the claim disks are the same files (a write on the target lands in
// them), the ephemeral one's claim is untouched (its overlay was copied), and the hot-plugged
// disk unplugs on the target like any other. A volume plugged while the guest migrates back
// waits (WaitingForMigration, a Normal event) and is attached by the node the guest then runs
// on; one removed while it migrates again is unplugged by the target after the switchover; no
// Warning event all along.
func TestMigrateClaimsAndHotplug(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	dir := nodeDir(t)
	claims := map[string]storage.Claim{}
	for _, c := range []string{"data", "base", "hot"} {
		path := writeClaim(t, filepath.Join(dir, c), "VMLET-"+strings.ToUpper(c), 8<<20)
		claims[c+"-claim"] = storage.Claim{Path: path, Shared: true}
	}
	n := startTwoNodesOpts(t, nil, func(o *agentOptions) { o.Claims = claims })
	defer n.stop(t)
	vmi := masqueradeVMI("mig-claims")
	vmi.Labels = map[string]string{"vmlet.dev/mig-claims": "slow"} // the slow policy's, created later
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, claimVolume("data", "data-claim", false),
		vmletv1.Volume{Name: "eph", VolumeSource: vmletv1.VolumeSource{Ephemeral: &vmletv1.EphemeralVolumeSource{
			PersistentVolumeClaim: &vmletv1.PersistentVolumeClaimSource{ClaimName: "base-claim"}}}})
	vmi.Spec.Domain.Devices.Disks = append(vmi.Spec.Domain.Devices.Disks, vmletv1.Disk{Name: "data", Serial: "data"}, vmletv1.Disk{Name: "eph", Serial: "eph"})
	ctx := context.Background()
	if err := env.Client.Create(ctx, vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(ctx, vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	// From here on it stays migratable: the hotplug changes the volumes it is judged by, and
	// the pass that sees the new volume must judge it with its status.
	mw := watchCondition(t, vmi, vmletv1.VirtualMachineInstanceIsMigratable)
	defer mw.stop()
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume("hot", "hot-claim", true))
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: "hot", Serial: "hot"})
	})
	vmi = waitVolumes(t, key, vmletv1.VolumeReady, "hot")
	for _, name := range []string{"data", "eph", "hot"} {
		s, _ := volumeStatus(vmi, name)
		if c := s.PersistentVolumeClaimInfo; c == nil || !slices.Equal(c.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}) {
			t.Errorf("volume %s: claim info %+v, want the shared claim described as ReadWriteMany", name, c)
		}
	}
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	if bad := mw.notReady(); len(bad) > 0 {
		t.Errorf("LiveMigratable was not True during the hotplug: %v", bad)
	}
	if vmi.Status.NodeName != testNode {
		t.Fatalf("runs on %s, want %s", vmi.Status.NodeName, testNode)
	}
	uid := string(vmi.UID)
	devs := map[string]string{}
	eventually(t, 30*time.Second, "the guest's three claim disks", func() (bool, string) {
		for serial, d := range guestDisksBySerial(t, launcherClient(t, n.a, vmi)) {
			devs[serial] = "/dev/" + d.dev
		}
		return devs["data"] != "" && devs["eph"] != "" && devs["hot"] != "", fmt.Sprint(devs)
	})
	mark := func(disk string) string { return disk + "-" + uid[:8] }
	for _, d := range []string{"data", "eph", "hot"} {
		guestShell(t, n.a, vmi, "printf "+mark(d)+" | dd of="+devs[d]+" bs=512 seek=100 conv=notrunc,fsync 2>/dev/null")
	}

	m := migrate(t, vmi, "mig-claims-there")
	if m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("phase %s, state %+v, conditions %+v", m.Status.Phase, m.Status.MigrationState, m.Status.Conditions)
	}
	vmi = mustGetVMI(t, vmi)
	ms := vmi.Status.MigrationState
	if vmi.Status.NodeName != secondNode || ms == nil || ms.SourceDomain == nil {
		t.Fatalf("after the migration: node %s, migrationState %+v", vmi.Status.NodeName, ms)
	}
	var hot *vmletv1.MigrationDevicePort
	for i, d := range ms.SourceDomain.Devices {
		if d.Kind == "disk" && d.ID == storage.DiskID("hot") {
			hot = &ms.SourceDomain.Devices[i]
		}
		if d.Hotplugged != (d.ID == storage.DiskID("hot")) {
			t.Errorf("source layout device %+v: hot-plugged mark wrong", d)
		}
	}
	if hot == nil {
		t.Fatalf("source layout %+v has no hot-plugged disk", ms.SourceDomain)
	}
	waitLauncherAgent(t, n.b, uid)
	cb := launcherClient(t, n.b, vmi)
	dom, err := cb.GetDomain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var port int32 = -1
	for _, d := range dom.GetLiveSpec().GetDisks() {
		if d.GetId() == hot.ID {
			port = d.GetPort()
		}
	}
	if port != hot.Port {
		t.Errorf("the target runs the hot-plugged disk on port %d, the source had it on %d", port, hot.Port)
	}
	after := guestDisksBySerial(t, cb)
	guestShell(t, n.b, vmi, "sync; echo 3 > /proc/sys/vm/drop_caches") // read the disks as the target has them
	for _, d := range []string{"data", "eph", "hot"} {
		dev := "/dev/" + after[d].dev
		if got := guestShell(t, n.b, vmi, "dd if="+dev+" bs=512 skip=100 count=1 2>/dev/null | head -c "+fmt.Sprint(len(mark(d)))); got != mark(d) {
			t.Errorf("disk %s on %s reads %q, want the mark written on %s", d, secondNode, got, testNode)
		}
	}
	// The claim disks are the same files on both nodes; the ephemeral disk's claim only backs
	// an overlay, on each node its own.
	guestShell(t, n.b, vmi, "printf again-"+uid[:8]+" | dd of=/dev/"+after["data"].dev+" bs=512 seek=101 conv=notrunc,fsync 2>/dev/null")
	for claim, want := range map[string]map[int64]string{
		"data": {100 * 512: mark("data"), 101 * 512: "again-" + uid[:8]},
		"hot":  {100 * 512: mark("hot")},
		"base": {0: "VMLET-BASE", 100 * 512: "\x00\x00\x00"},
	} {
		for off, text := range want {
			if got := readAt(t, filepath.Join(dir, claim, "disk.img"), off, len(text)); got != text {
				t.Errorf("claim %s's disk.img at %d holds %q, want %q", claim, off, got, text)
			}
		}
	}
	waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)

	// The hot-plugged disk is the target's like any other: it unplugs there.
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = slices.DeleteFunc(s.Volumes, func(v vmletv1.Volume) bool { return v.Name == "hot" })
		s.Domain.Devices.Disks = slices.DeleteFunc(s.Domain.Devices.Disks, func(d vmletv1.Disk) bool { return d.Name == "hot" })
	})
	eventually(t, time.Minute, "the hot-plugged disk unplugged on "+secondNode, func() (bool, string) {
		_, inGuest := guestDisksBySerial(t, cb)["hot"]
		d, err := cb.GetDomain(ctx)
		if err != nil {
			return false, err.Error()
		}
		ids := d.GetDisks()
		return !inGuest && !slices.Contains(ids, hot.ID), fmt.Sprintf("in the guest: %v, launcher disks %v", inGuest, ids)
	})

	// Plugged while the guest migrates back (slowly: 8 MiB/s for a 128 MiB guest): it waits,
	// and the node the guest then runs on attaches it; QEMU is never asked to plug mid-stream.
	createPolicy(t, "mig-claims-slow", map[string]string{"vmlet.dev/mig-claims": "slow"}, nil, func(s *migrationsv1.MigrationPolicySpec) {
		s.BandwidthPerMigration = ptr.To(resource.MustParse("8Mi"))
	})
	back := startMigration(t, vmi, "mig-claims-back")
	waitMigrationPhase(t, back, vmletv1.MigrationRunning)
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = append(s.Volumes, claimVolume("hot", "hot-claim", true))
		s.Domain.Devices.Disks = append(s.Domain.Devices.Disks, vmletv1.Disk{Name: "hot", Serial: "hot"})
	})
	eventually(t, 30*time.Second, "the volume waiting for the migration", func() (bool, string) {
		st, _ := volumeStatus(mustGetVMI(t, vmi), "hot")
		return st.Phase == vmletv1.VolumePending && st.Reason == string(vmistatus.ReasonHotplugAfterMigration), fmt.Sprintf("%+v", st)
	})
	if m := waitMigration(t, back, 2*time.Minute); m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration back: phase %s, state %+v", m.Status.Phase, m.Status.MigrationState)
	}
	vmi = waitVolumes(t, key, vmletv1.VolumeReady, "hot")
	if vmi.Status.NodeName != testNode {
		t.Fatalf("after the migration back: on %s", vmi.Status.NodeName)
	}
	waitLauncherAgent(t, n.a, uid)
	ca := launcherClient(t, n.a, vmi)
	eventually(t, 30*time.Second, "the guest sees the disk plugged after the migration", func() (bool, string) {
		d, ok := guestDisksBySerial(t, ca)["hot"]
		return ok, fmt.Sprintf("%+v", d)
	})
	if got := guestRun(t, ca, "dd if=/dev/"+guestDisksBySerial(t, ca)["hot"].dev+" bs=512 skip=100 count=1 2>/dev/null | head -c "+fmt.Sprint(len(mark("hot")))); got != mark("hot") {
		t.Errorf("the disk plugged after the migration reads %q, want %q", got, mark("hot"))
	}

	// Removed while the guest migrates (the target already runs it): QEMU is not asked to
	// unplug mid-stream; the migration succeeds and the node the guest then runs on unplugs it.
	again := startMigration(t, vmi, "mig-claims-unplug")
	waitMigrationPhase(t, again, vmletv1.MigrationRunning)
	patchVolumes(t, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
		s.Volumes = slices.DeleteFunc(s.Volumes, func(v vmletv1.Volume) bool { return v.Name == "hot" })
		s.Domain.Devices.Disks = slices.DeleteFunc(s.Domain.Devices.Disks, func(d vmletv1.Disk) bool { return d.Name == "hot" })
	})
	if m := waitMigration(t, again, 2*time.Minute); m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration with the volume removed: phase %s, state %+v", m.Status.Phase, m.Status.MigrationState)
	}
	if vmi = mustGetVMI(t, vmi); vmi.Status.NodeName != secondNode {
		t.Fatalf("after the migration with the volume removed: on %s", vmi.Status.NodeName)
	}
	waitLauncherAgent(t, n.b, uid)
	cb = launcherClient(t, n.b, vmi)
	eventually(t, time.Minute, "the removed disk unplugged on "+secondNode, func() (bool, string) {
		_, inGuest := guestDisksBySerial(t, cb)["hot"]
		d, err := cb.GetDomain(ctx)
		if err != nil {
			return false, err.Error()
		}
		_, st := volumeStatus(mustGetVMI(t, vmi), "hot")
		ids := d.GetDisks()
		return !inGuest && !slices.Contains(ids, hot.ID) && !st, fmt.Sprintf("in the guest: %v, launcher disks %v, in the volume status: %v", inGuest, ids, st)
	})
	var events eventsv1.EventList
	if err := env.Client.List(ctx, &events, client.InNamespace(vmi.Namespace)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.UID == vmi.UID && e.Type == "Warning" {
			t.Errorf("Warning event %s: %s", e.Reason, e.Note)
		}
	}
	waitLeft(t, n.a, testNet.cfg.NetnsDir, volumeRoot, uid)
}
