package launcher

import (
	"context"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// SetCPUs plugs or unplugs vCPU sockets until sockets are present and returns the domain
// after it (Domain.cpu.unplug_pending counts unplugs the guest has not completed yet).
func (c *Client) SetCPUs(ctx context.Context, sockets int) (*pb.Domain, error) {
	r, err := c.api.SetCPUs(ctx, &pb.SetCPUsRequest{Sockets: int32(sockets)})
	if err != nil {
		return nil, wrap("set cpus", err)
	}
	return r.GetDomain(), nil
}

// SetMemory sets the virtio-mem requested size (MiB beyond the boot memory); the guest plugs
// or unplugs in its own time (ResourceEvent "memory", Domain.memory.plugged_bytes).
func (c *Client) SetMemory(ctx context.Context, requestedMiB int) (*pb.Domain, error) {
	r, err := c.api.SetMemory(ctx, &pb.SetMemoryRequest{RequestedMib: int32(requestedMiB)})
	if err != nil {
		return nil, wrap("set memory", err)
	}
	return r.GetDomain(), nil
}
