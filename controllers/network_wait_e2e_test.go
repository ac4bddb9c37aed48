package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestVMIWaitsForItsNetwork: KubeVirt's vmi-multus-ptp, whose only interface is on the multus
// network ptp-conf, on a node that does not offer it, does not start (in KubeVirt its launcher
// pod cannot start without the network): it stays Scheduled with Synchronized=False,
// UnknownNetwork, a Warning event, and no launcher. Once the node offers ptp-conf (here: the
// agent restarted with it) the VMI starts and its guest gets its address on that network.
// Before, it ran with no NIC at all and Ready=True.
func TestVMIWaitsForItsNetwork(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	a := startAgent(t, agentOptions{})
	stopped := false
	defer func() {
		if !stopped {
			a.stop(t)
		}
	}()
	// vmi-multus-ptp as KubeVirt's examples write it, booting the test guest's kernel instead
	// of its fedora containerDisk (the test guest has no bootable disk image of that name).
	vmi := newVMI("multus-ptp")
	ifc, nw := secondaryNIC("ptp", "ptp-conf")
	vmi.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{ifc}
	vmi.Spec.Networks = []vmletv1.Network{nw}
	if err := env.Client.Create(context.Background(), vmi); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(vmi)
	got := waitSynchronized(t, key, metav1.ConditionFalse, "UnknownNetwork")
	waitEvent(t, got, "UnknownNetwork")
	if got.Status.Phase != vmletv1.Scheduled {
		t.Errorf("phase %s, want Scheduled: %s", got.Status.Phase, summary(got))
	}
	if _, err := os.Stat(filepath.Join(runRoot, string(got.UID))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a launcher was started for a VMI whose network is missing: %v", err)
	}

	a.stop(t)
	stopped = true
	a = startAgent(t, agentOptions{Secondary: []string{"vmlet-node", "ptp-conf"}})
	stopped = false
	got = waitPhase(t, key, vmletv1.Running, 2*time.Minute)
	eventually(t, 2*time.Minute, "ptp interface address in status", func() (bool, string) {
		v, err := getVMI(t, key)
		if err != nil {
			return false, err.Error()
		}
		s, ok := statusInterface(v, "ptp")
		return ok && s.IP != "", fmt.Sprintf("%+v", v.Status.Interfaces)
	})
	if err := env.Client.Delete(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	waitDeleted(t, key)
	assertNothingLeft(t, string(got.UID), int(got.Status.Launcher.PID))
}
