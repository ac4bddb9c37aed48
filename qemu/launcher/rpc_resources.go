package launcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// ResourceEvent kinds.
const (
	resourceCPU    = "cpu"
	resourceMemory = "memory"
)

// resourceQueryTimeout bounds the QMP reads behind Domain.cpu and Domain.memory.
const resourceQueryTimeout = 5 * time.Second

// SetCPUs implements the SetCPUs RPC: plugs complete before it answers; unplugs the guest has
// not completed within the caller's deadline (less a margin; unplugTimeout without one) stay
// pending and show in Domain.cpu.unplug_pending. QMP: see qemu.VM.SetCPUs.
func (l *api) SetCPUs(ctx context.Context, req *pb.SetCPUsRequest) (*pb.SetCPUsResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	before, err := d.vm.CPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("set cpus: %w", err)
	}
	after, err := d.vm.SetCPUs(ctx, int(req.GetSockets()), unplugWait(ctx))
	if err != nil {
		return nil, fmt.Errorf("set cpus: %w", err)
	}
	if after.Sockets > before.Sockets {
		d.resourceEvent(resourceCPU) // unplugs report themselves (DEVICE_DELETED, onEvent)
	}
	return &pb.SetCPUsResponse{Domain: d.snapshot()}, nil
}

// SetMemory implements the SetMemory RPC: it sets the virtio-mem requested size and answers
// at once; MEMORY_DEVICE_SIZE_CHANGE events (ResourceEvent "memory") follow as the guest
// plugs or unplugs. QMP: qom-set requested-size.
func (l *api) SetMemory(ctx context.Context, req *pb.SetMemoryRequest) (*pb.SetMemoryResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if _, err := d.vm.SetMemory(ctx, int(req.GetRequestedMib())); err != nil {
		return nil, fmt.Errorf("set memory: %w", err)
	}
	return &pb.SetMemoryResponse{Domain: d.snapshot()}, nil
}

// unplugWait is how long SetCPUs waits for the guest to eject vCPUs: unplugTimeout, or until a
// little before the caller's deadline.
func unplugWait(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return max(min(time.Until(dl)-unplugReplyMargin, unplugTimeout), 0)
	}
	return unplugTimeout
}

func (d *domain) resourceEvent(kind string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.l.events.resource(kind)
}

// resources reads Domain.cpu and Domain.memory from QEMU (each nil when the domain has no
// such hotplug, or when QEMU does not answer).
func (d *domain) resources() (*pb.CPUStatus, *pb.MemoryStatus) {
	ctx, cancel := context.WithTimeout(context.Background(), resourceQueryTimeout)
	defer cancel()
	var cpu *pb.CPUStatus
	if c, err := d.vm.CPUs(ctx); err == nil {
		cpu = CPUStatusToProto(c)
	} else if !errors.Is(err, qemu.ErrNotHotpluggable) {
		d.l.log.Debug("read cpu status", "err", err)
	}
	var mem *pb.MemoryStatus
	if m, err := d.vm.Memory(ctx); err == nil {
		mem = MemoryStatusToProto(m)
	} else if !errors.Is(err, qemu.ErrNotHotpluggable) {
		d.l.log.Debug("read memory status", "err", err)
	}
	return cpu, mem
}

// CPUStatusToProto converts the driver's vCPU status.
func CPUStatusToProto(c qemu.CPUStatus) *pb.CPUStatus {
	return &pb.CPUStatus{Sockets: int32(c.Sockets), Cores: int32(c.Cores), Threads: int32(c.Threads),
		MaxSockets: int32(c.MaxSockets), UnplugPending: int32(c.UnplugPending)}
}

// MemoryStatusToProto converts the driver's memory status.
func MemoryStatusToProto(m qemu.MemoryStatus) *pb.MemoryStatus {
	return &pb.MemoryStatus{BootBytes: m.BootBytes, PluggedBytes: m.PluggedBytes, RequestedBytes: m.RequestedBytes,
		MaxBytes: m.MaxBytes, BlockBytes: m.BlockBytes}
}
