package deviceplugin_test

import (
	"errors"
	"slices"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vmlet/vmlet/nodeagent/deviceplugin"
)

func names(rs []deviceplugin.Resource) []string {
	var n []string
	for _, r := range rs {
		n = append(n, r.Name)
	}
	return n
}

// TestSelect: a resource is advertised exactly where its probed fact holds; kvm follows the
// accelerator decision, so a node whose /dev/kvm opens but cannot run guests has none.
func TestSelect(t *testing.T) {
	for _, c := range []struct {
		f    deviceplugin.Facts
		want []string
	}{
		{deviceplugin.Facts{}, nil},
		{deviceplugin.Facts{Tun: true}, []string{"devices.vmlet.dev/tun"}},
		{deviceplugin.Facts{Tun: true, VhostNet: true}, []string{"devices.vmlet.dev/tun", "devices.vmlet.dev/vhost-net"}},
		{deviceplugin.Facts{KVM: true, Tun: true, VhostNet: true}, []string{"devices.vmlet.dev/kvm", "devices.vmlet.dev/tun", "devices.vmlet.dev/vhost-net"}},
		{deviceplugin.Facts{KVM: true}, []string{"devices.vmlet.dev/kvm"}},
	} {
		if got := names(deviceplugin.Select(c.f)); !slices.Equal(got, c.want) {
			t.Errorf("Select(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
	for _, r := range deviceplugin.Select(deviceplugin.Facts{KVM: true, Tun: true, VhostNet: true}) {
		if r.Socket == "" || r.Path == "" {
			t.Errorf("%s: socket %q path %q", r.Name, r.Socket, r.Path)
		}
	}
}

// TestAllocate: every container gets the one device node read-write at its host path, whatever
// number of the interchangeable devices it got; IDs never advertised are refused.
func TestAllocate(t *testing.T) {
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: []string{"7"}}, {DevicesIds: []string{"0", "999"}},
	}}
	resp, err := deviceplugin.Allocate(deviceplugin.Tun, 1000, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("%d container responses, want 2", len(resp.ContainerResponses))
	}
	for i, c := range resp.ContainerResponses {
		if len(c.Devices) != 1 {
			t.Fatalf("container %d: %d device specs, want 1", i, len(c.Devices))
		}
		d := c.Devices[0]
		if d.HostPath != "/dev/net/tun" || d.ContainerPath != "/dev/net/tun" || d.Permissions != "rw" {
			t.Errorf("container %d: %+v", i, d)
		}
		if len(c.Mounts) != 0 || len(c.Envs) != 0 {
			t.Errorf("container %d: mounts %v envs %v, want none", i, c.Mounts, c.Envs)
		}
	}
	for _, bad := range []string{"1000", "-1", "x", "07", ""} {
		_, err := deviceplugin.Allocate(deviceplugin.KVM, 1000, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{bad}}}})
		if !errors.Is(err, deviceplugin.ErrUnknownDevice) {
			t.Errorf("Allocate(%q) error %v, want ErrUnknownDevice", bad, err)
		}
	}
	if ids := deviceplugin.DeviceIDs(3); !slices.Equal(ids, []string{"0", "1", "2"}) {
		t.Errorf("DeviceIDs(3) = %v", ids)
	}
}
