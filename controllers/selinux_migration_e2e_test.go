package controllers_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/selinuxlabel"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// TestSELinuxMigrationLevels: with labelling forced on both nodes, a migrated guest's files on
// the target are labelled at the source's level (the default, matchSELinuxLevelOnMigration
// unset), and status.selinuxContext keeps it; with matchSELinuxLevelOnMigration: false the
// next target labels them at a level of its own, which the status then reports.
func TestSELinuxMigrationLevels(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	state := selinuxlabel.Probe()
	n := startTwoNodesOpts(t, nil, func(o *agentOptions) {
		o.SELinux = &controllers.NodeSELinux{State: state, Relabel: controllers.RelabelAlways}
	})
	defer n.stop(t)
	vmi := masqueradeVMI("se-mig")
	vmi.Spec.Volumes = append(vmi.Spec.Volumes, vmletv1.Volume{Name: "scratch",
		VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{Capacity: resource.MustParse("16Mi")}}})
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	defer waitDeleted(t, key)
	defer func() { _ = env.Client.Delete(context.Background(), vmi) }()
	waitCondition(t, key, vmletv1.VirtualMachineInstanceAgentConnected, metav1.ConditionTrue, 2*time.Minute)
	vmi = waitCondition(t, key, vmletv1.VirtualMachineInstanceIsMigratable, metav1.ConditionTrue, 10*time.Second)
	uid := string(vmi.UID)
	src, err := selinuxlabel.ParseContext(vmi.Status.SelinuxContext)
	if err != nil {
		t.Fatalf("source status.selinuxContext %q: %v", vmi.Status.SelinuxContext, err)
	}
	overlay := func(volumes string) string { return filepath.Join(volumes, uid, "disks", "scratch.qcow2") }
	checkOn := func(volumes, level string) {
		t.Helper()
		want := "system_u:object_r:container_file_t:" + level
		if got, _, err := selinuxlabel.FileLabel(overlay(volumes)); err != nil || got != want {
			t.Errorf("%s: %q (%v), want %q", overlay(volumes), got, err, want)
		}
	}
	checkOn(volumeRoot, src.Level)

	if m := migrate(t, vmi, "se-mig-there"); m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration %s: %+v", m.Status.Phase, m.Status.Conditions)
	}
	there := waitCondition(t, key, vmletv1.VirtualMachineInstanceReady, metav1.ConditionTrue, time.Minute)
	if there.Status.NodeName != secondNode || there.Status.SelinuxContext != src.String() {
		t.Errorf("after the migration: node %s, selinuxContext %q; want %s and the source's %q", there.Status.NodeName, there.Status.SelinuxContext, secondNode, src)
	}
	checkOn(n.dirsB.VolumeRoot, src.Level)

	setMigrationConfig(t, "matchSELinuxLevelOnMigration: false\n")
	defer setMigrationConfig(t, "")
	if m := migrate(t, there, "se-mig-back"); m.Status.Phase != vmletv1.MigrationSucceeded {
		t.Fatalf("migration back %s: %+v", m.Status.Phase, m.Status.Conditions)
	}
	var back *vmletv1.VirtualMachineInstance
	eventually(t, time.Minute, "status.selinuxContext of the new level", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		back = v
		return v.Status.NodeName == testNode && v.Status.SelinuxContext != src.String(), v.Status.NodeName + " " + v.Status.SelinuxContext
	})
	own, err := selinuxlabel.ParseContext(back.Status.SelinuxContext)
	if err != nil || own.Level == src.Level {
		t.Fatalf("target's own context %q (%v): want a level other than the source's %s", back.Status.SelinuxContext, err, src.Level)
	}
	checkOn(volumeRoot, own.Level)
}
