package deviceplugin

import (
	"context"
	"sync"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// plugin is the DevicePlugin gRPC service of one resource: Count interchangeable devices,
// all healthy or all unhealthy with the device node.
type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	res   Resource
	count int

	mu      sync.Mutex
	healthy bool
	changed chan struct{} // closed (and replaced) when healthy changes
}

var _ pluginapi.DevicePluginServer = (*plugin)(nil)

func newPlugin(r Resource, count int, healthy bool) *plugin {
	return &plugin{res: r, count: count, healthy: healthy, changed: make(chan struct{})}
}

// setHealthy records the device node's health; ListAndWatch streams send the new list.
func (p *plugin) setHealthy(h bool) (changed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healthy == h {
		return false
	}
	p.healthy = h
	close(p.changed)
	p.changed = make(chan struct{})
	return true
}

func (p *plugin) list() (*pluginapi.ListAndWatchResponse, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	health := pluginapi.Unhealthy
	if p.healthy {
		health = pluginapi.Healthy
	}
	resp := &pluginapi.ListAndWatchResponse{Devices: make([]*pluginapi.Device, 0, p.count)}
	for _, id := range DeviceIDs(p.count) {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: health})
	}
	return resp, p.changed
}

// GetDevicePluginOptions implements the RPC: no PreStartContainer, no preferred allocation.
func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch implements the RPC: the device list now, and again on every health change, until
// the kubelet hangs up or the server stops.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		resp, changed := p.list()
		if err := s.Send(resp); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-s.Context().Done():
			return nil
		}
	}
}

// Allocate implements the RPC (see Allocate).
func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return Allocate(p.res, p.count, req)
}

// GetPreferredAllocation implements the RPC; never called (the options do not offer it).
func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

// PreStartContainer implements the RPC; never called (the options do not ask for it).
func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
