package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/test/testguest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// displayDevice finds the VMI's display device (QEMU id video_0) in the launcher's query-pci,
// and whether its launcher serves the VNC socket.
func displayDevice(t *testing.T, a *agent, v *vmletv1.VirtualMachineInstance) (addr qemu.PCIAddr, found, vnc bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := launcher.Dial(ctx, a.runtime.Socket(string(v.UID)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	devs, err := c.PCIDevices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for pa, id := range devs {
		if id == "video_0" {
			addr, found = pa, true
		}
	}
	_, err = c.Screenshot(ctx)
	return addr, found, err == nil
}

// waitGuestOSInfo waits until status.guestOSInfo is the test guest's os-release and kernel.
func waitGuestOSInfo(t *testing.T, v *vmletv1.VirtualMachineInstance) {
	t.Helper()
	osr := testguest.OSRelease(t)
	want := vmletv1.VirtualMachineInstanceGuestOSInfo{
		Name: osr["NAME"], PrettyName: osr["PRETTY_NAME"], Version: osr["VERSION"], VersionID: osr["VERSION_ID"],
		ID: osr["ID"], KernelRelease: testguest.KernelRelease(t), Machine: "x86_64",
	}
	eventually(t, time.Minute, v.Name+" status.guestOSInfo", func() (bool, string) {
		got, err := getVMI(t, client.ObjectKeyFromObject(v))
		if err != nil {
			return false, err.Error()
		}
		g := got.Status.GuestOSInfo
		kv := g.KernelVersion
		g.KernelVersion = ""
		return g == want && kv != "", fmt.Sprintf("%+v, want %+v and a kernel version", got.Status.GuestOSInfo, want)
	})
}
