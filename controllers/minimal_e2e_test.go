package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// bootDiskImage is a BIOS-bootable containerDisk of the test guest (test/assets/bootdisk).
const bootDiskImage = "vmlet.dev/bootdisk:test"

// minimalVMIs are VMIs as a user writes them by hand: the fewest fields the API accepts, and
// nothing the Go types would add on a round trip (no resources, no cpu, no firmware, no disks
// or interfaces unless the case is about them). guest says whether the test guest boots
// (a console marker to wait for); the others have nothing bootable and run at the QEMU level.
var minimalVMIs = []struct {
	name, manifest string
	guest          bool
}{
	{name: "min-memory", manifest: `
spec:
  domain:
    memory: {guest: 128Mi}
    devices: {}`},
	{name: "min-requests", manifest: `
spec:
  domain:
    resources:
      requests: {memory: 128Mi}
    devices: {}`},
	{name: "min-kernelboot", guest: true, manifest: `
spec:
  domain:
    memory: {guest: 128Mi}
    firmware:
      kernelBoot:
        kernelArgs: console=ttyS0 quiet panic=-1
        container: {image: ` + guestImage + `, kernelPath: /vmlinuz, initrdPath: /initramfs.gz}
    devices: {}`},
	// No display: autoattachGraphicsDevice false (the others get KubeVirt's default one).
	{name: "min-nographics", manifest: `
spec:
  domain:
    memory: {guest: 128Mi}
    devices: {autoattachGraphicsDevice: false}`},
	// A volume with no disk gets a default virtio disk, as in KubeVirt.
	{name: "min-containerdisk", guest: true, manifest: `
spec:
  domain:
    memory: {guest: 128Mi}
    devices: {}
  volumes:
  - name: root
    containerDisk: {image: ` + bootDiskImage + `}`},
	{name: "min-disk-no-target", guest: true, manifest: `
spec:
  domain:
    memory: {guest: 128Mi}
    devices:
      disks:
      - name: root
      interfaces:
      - name: default
        masquerade: {}
  networks:
  - name: default
    pod: {}
  volumes:
  - name: root
    containerDisk: {image: ` + bootDiskImage + `}`},
}

// TestMinimalVMIs applies the minimal VMIs as raw YAML, the way `kubectl apply` does: the API
// server stores exactly what was written. Each reaches Running (the bootable ones print the
// guest's ready marker) and is deleted without leftovers. The agent's own writes (finalizer,
// status) must not resend a spec that the Go types would fill in (e.g. `resources: {}`), which
// the immutability rules refuse: before that was fixed such a VMI stayed Scheduled for good.
func TestMinimalVMIs(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	testguest.Assets(t)
	ref := bootDiskLayout(t)
	a := startAgent(t, agentOptions{ImageSources: map[string]string{bootDiskImage: ref}})
	defer a.stop(t)
	ctx := context.Background()

	for _, tt := range minimalVMIs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(tt.manifest), &u.Object); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		u.SetAPIVersion(vmletv1.GroupVersion.String())
		u.SetKind("VirtualMachineInstance")
		u.SetNamespace("default")
		u.SetName(tt.name)
		if err := env.Client.Create(ctx, u); err != nil {
			t.Fatalf("%s: the API refused a minimal VMI: %v", tt.name, err)
		}
	}
	// All boot at once; one wait for all of them, so a VMI that never starts fails the test
	// once (with every VMI's state), not once per VMI.
	running := map[string]*vmletv1.VirtualMachineInstance{}
	eventually(t, 3*time.Minute, "every minimal VMI Running", func() (bool, string) {
		var waiting []string
		for _, tt := range minimalVMIs {
			v, err := getVMI(t, client.ObjectKey{Namespace: "default", Name: tt.name})
			switch {
			case err != nil:
				waiting = append(waiting, tt.name+": "+err.Error())
			case v.Status.Phase != vmletv1.Running:
				waiting = append(waiting, tt.name+": "+summary(v))
			default:
				running[tt.name] = v
			}
		}
		return len(waiting) == 0, strings.Join(waiting, "; ")
	})
	for _, tt := range minimalVMIs {
		t.Run(tt.name, func(t *testing.T) {
			v := running[tt.name]
			if tt.guest {
				waitSerial(t, consoleLog(v), testguest.MarkerReady)
				// The guest agent's data in status: the os-release, the NIC's name in the guest.
				waitGuestOSInfo(t, v)
				waitAgentConfirms(t, v)
			}
			// A display by default (VGA at 00:01.0, Screenshot answers); none when asked.
			wantDisplay := !strings.Contains(tt.manifest, "autoattachGraphicsDevice: false")
			addr, found, vnc := displayDevice(t, a, v)
			if found != wantDisplay || vnc != wantDisplay || (found && addr != (qemu.PCIAddr{Bus: 0, Slot: 1})) {
				t.Errorf("display device found=%v at %+v, screenshot=%v; want display=%v at 00:01.0", found, addr, vnc, wantDisplay)
			}
			// What the user wrote is what is stored: no agent write added to the spec.
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(vmletv1.GroupVersion.WithKind("VirtualMachineInstance"))
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(v), got); err != nil {
				t.Fatal(err)
			}
			if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "domain", "resources"); found && tt.name != "min-requests" {
				t.Errorf("spec.domain.resources appeared in the stored spec: %v", got.Object["spec"])
			}
		})
	}
	// Deleted together: the guests without anything bootable ignore ACPI and are stopped at the
	// end of the default 30 s grace period.
	for _, v := range running {
		if err := env.Client.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range running {
		waitDeleted(t, client.ObjectKeyFromObject(v))
		assertNothingLeft(t, string(v.UID), int(v.Status.Launcher.PID))
	}
}
