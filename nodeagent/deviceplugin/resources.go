package deviceplugin

import (
	"errors"
	"fmt"
	"strconv"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// DefaultCount is how many devices each resource advertises (KubeVirt's virt-handler uses
// 1000 as well): how many pods of a node may use one device node at once.
const DefaultCount = 1000

// Resource is one extended resource: a device node handed to containers at its host path.
type Resource struct {
	Name string // extended resource name, e.g. devices.vmlet.dev/tun
	Path string // device node on the host and in the container
	// Socket is the plugin's socket file name in the kubelet's device-plugins folder.
	Socket string
}

// The resources vmlet's plugin may advertise.
var (
	KVM      = Resource{Name: launcherpod.ResourceKVM, Path: "/dev/kvm", Socket: "vmlet-kvm.sock"}
	Tun      = Resource{Name: launcherpod.ResourceTun, Path: "/dev/net/tun", Socket: "vmlet-tun.sock"}
	VhostNet = Resource{Name: launcherpod.ResourceVhostNet, Path: "/dev/vhost-net", Socket: "vmlet-vhost-net.sock"}
)

// Facts are the probed facts the advertised resources follow.
type Facts struct {
	// KVM: the accelerator decision is KVM (accel.Decision.KVMUsable), not merely "/dev/kvm opens".
	KVM      bool
	Tun      bool // /dev/net/tun is the tun char device
	VhostNet bool // /dev/vhost-net is the vhost-net char device
}

// Select returns the resources a node with f advertises, in a fixed order (kvm, tun,
// vhost-net). Pure.
func Select(f Facts) []Resource {
	var rs []Resource
	if f.KVM {
		rs = append(rs, KVM)
	}
	if f.Tun {
		rs = append(rs, Tun)
	}
	if f.VhostNet {
		rs = append(rs, VhostNet)
	}
	return rs
}

// DeviceIDs are the IDs of a resource's n devices: "0" .. "n-1".
func DeviceIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	return ids
}

// ErrUnknownDevice is returned by Allocate for a device ID the plugin never advertised.
var ErrUnknownDevice = errors.New("unknown device")

// Allocate answers the kubelet's Allocate for r with count devices: every container gets r's
// device node at its host path, read-write, however many of the (interchangeable) devices it
// was given. Pure.
func Allocate(r Resource, count int, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		for _, id := range c.GetDevicesIds() {
			if i, err := strconv.Atoi(id); err != nil || i < 0 || i >= count || strconv.Itoa(i) != id {
				return nil, fmt.Errorf("allocate %s: %w %q", r.Name, ErrUnknownDevice, id)
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Devices: []*pluginapi.DeviceSpec{{ContainerPath: r.Path, HostPath: r.Path, Permissions: "rw"}},
		})
	}
	return resp, nil
}
