package controllers_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/assets/images"
	"github.com/vmlet/vmlet/test/prereq"
	"github.com/vmlet/vmlet/test/testguest"
)

// The containerDisk images of KubeVirt's examples, which these machines cannot pull: the tests
// serve the test guest's data disk under these references.
var fixtureImages = []string{
	"registry:5000/kubevirt/fedora-with-test-tooling-container-disk:devel",
	"registry:5000/kubevirt/alpine-container-disk-demo:devel",
}

// kubevirtFixture reads one of KubeVirt's example VMIs (shared/kubevirt-examples) with only its
// apiVersion changed, into namespace default.
func kubevirtFixture(t *testing.T, name string) *vmletv1.VirtualMachineInstance {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(apienv.RepoRoot(), "..", "shared", "kubevirt-examples", name))
	if err != nil {
		t.Fatal(err)
	}
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := yaml.UnmarshalStrict(b, vmi); err != nil {
		t.Fatalf("decode %s: %v", name, err)
	}
	vmi.APIVersion = vmletv1.GroupVersion.String()
	vmi.Namespace = "default"
	return vmi
}

// TestKubeVirtNetworkFixtures runs KubeVirt's vmi-masquerade and vmi-migratable examples: their
// interfaces, networks, containerDisk and cloud-init volumes as written. The one addition is a
// kernelBoot of the test guest, because the test guest exists as a kernel and initramfs only
// (no bootable disk image): the containerDisk is attached as a data disk. Each guest gets its
// address by DHCP, and a service in it answers a client namespace through the pod address:
// port 80 of vmi-masquerade (declared), any port of vmi-migratable (none declared: all).
func TestKubeVirtNetworkFixtures(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	files := testguest.Assets(t)
	img, err := images.ContainerDisk(files.DataDisk)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := images.WriteLayout(filepath.Join(t.TempDir(), "containerdisk"), img, "test")
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{}
	for _, i := range fixtureImages {
		sources[i] = ref
	}
	a := startAgent(t, agentOptions{ImageSources: sources})
	defer func() { a.stop(t) }()
	clientNS, removeClient, err := addClient("fix")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := removeClient(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	boot := newVMI("boot").Spec.Domain.Firmware

	tests := []struct {
		file, marker string
		port         uint16
	}{
		{file: "vmi-masquerade.yaml", port: 80, marker: "VMLET-HELLO-FIXTURE-MASQUERADE"},
		{file: "vmi-migratable.yaml", port: 8080, marker: "VMLET-HELLO-FIXTURE-MIGRATABLE"},
	}
	var vmis []*vmletv1.VirtualMachineInstance
	for _, tt := range tests {
		vmi := kubevirtFixture(t, tt.file)
		vmi.Spec.Domain.Firmware = boot.DeepCopy()
		if err := env.Client.Create(ctx, vmi); err != nil {
			t.Fatalf("create %s: %v", tt.file, err)
		}
		vmis = append(vmis, vmi)
	}
	for i, tt := range tests {
		vmi := vmis[i]
		start := vmi.CreationTimestamp.Time
		got, _ := waitAddress(t, client.ObjectKeyFromObject(vmi), 2*time.Minute)
		t.Logf("%s: address %s in status %s after creation", tt.file, got.Status.Interfaces[0].IP, time.Since(start).Round(time.Second))
		addr := netip.MustParseAddr(got.Status.Interfaces[0].IP)
		waitConsoleLine(t, got, testguest.MarkerIP+" eth0 10.0.2.2")
		waitAgentConfirms(t, got)
		guestServe(t, a, got, int(tt.port), tt.marker)
		waitReply(t, clientNS, netip.AddrPortFrom(addr, tt.port), tt.marker+"\n")
	}
	for _, v := range vmis {
		if err := env.Client.Delete(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range vmis {
		waitDeleted(t, client.ObjectKeyFromObject(v))
		assertNothingLeft(t, string(v.UID))
		assertNoPodNetwork(t, string(v.UID))
	}
	assertNodeNetworkGone(t)
}
