package launcher

import (
	"context"
	"fmt"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// unplugTimeout bounds an unplug when the caller's context has no deadline: the guest must
// release the device (DEVICE_DELETED), and a guest that ignores the request never does.
// unplugReplyMargin is how much earlier than the caller's deadline an unplug answers.
const (
	unplugTimeout     = 30 * time.Second
	unplugReplyMargin = 250 * time.Millisecond
)

// HotplugDisk implements the HotplugDisk RPC: a disk whose image files the agent handed over
// (HandOverDisk) is opened from them, and the launcher closes its copies when AddDisk
// returned (a retry needs a new hand-over); any other disk by its path.
// QMP: [add-fd per file], blockdev-add ×2, device_add.
func (l *api) HotplugDisk(ctx context.Context, req *pb.HotplugDiskRequest) (*pb.HotplugDiskResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if req.GetDisk() == nil {
		return nil, fmt.Errorf("hotplug disk: %w: disk missing", ErrInvalidRequest)
	}
	disk := DiskFromProto(req.GetDisk())
	disk.Files = l.disks.take(disk.ID)
	defer closeFiles(disk.Files) // QEMU holds its own copies
	if err := d.vm.AddDisk(ctx, disk); err != nil {
		return nil, fmt.Errorf("hotplug disk: %w", err)
	}
	d.deviceEvent(pb.DeviceEvent_KIND_DISK, pb.DeviceEvent_ACTION_ADDED, disk.ID)
	return &pb.HotplugDiskResponse{}, nil
}

// UnplugDisk implements the UnplugDisk RPC; it returns once the guest released the disk.
// QMP: device_del, event DEVICE_DELETED, blockdev-del ×2.
func (l *api) UnplugDisk(ctx context.Context, req *pb.UnplugDiskRequest) (*pb.UnplugDiskResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	ctx, cancel := unplugContext(ctx)
	defer cancel()
	if err := d.vm.RemoveDisk(ctx, req.GetId()); err != nil {
		return nil, fmt.Errorf("unplug disk: %w", err)
	}
	d.deviceEvent(pb.DeviceEvent_KIND_DISK, pb.DeviceEvent_ACTION_REMOVED, req.GetId())
	return &pb.UnplugDiskResponse{}, nil
}

// HotplugNIC implements the HotplugNIC RPC: the launcher opens the named tap in its
// namespace and passes the fds to QEMU. QMP: getfd per queue, netdev_add, device_add.
func (l *api) HotplugNIC(ctx context.Context, req *pb.HotplugNICRequest) (*pb.HotplugNICResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	n := req.GetNic()
	if n == nil || n.GetTapName() == "" {
		return nil, fmt.Errorf("hotplug nic: %w: nic with a tap_name required", ErrInvalidRequest)
	}
	nic := NICFromProto(n)
	ref := tapRef{Name: n.GetTapName(), NetNS: n.GetNetns(), Queues: int(n.GetQueues())}
	nic.TapName, nic.Queues = "", 0 // replaced by the fds; AddNIC validates the rest
	files, err := l.tapFiles(ref)
	if err != nil {
		return nil, fmt.Errorf("hotplug nic %s: %w", nic.ID, err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	nic.TapFDs = files
	if err := d.vm.AddNIC(ctx, nic); err != nil {
		return nil, fmt.Errorf("hotplug nic: %w", err)
	}
	d.addTap(nic.ID, ref)
	d.deviceEvent(pb.DeviceEvent_KIND_NIC, pb.DeviceEvent_ACTION_ADDED, nic.ID)
	return &pb.HotplugNICResponse{}, nil
}

// UnplugNIC implements the UnplugNIC RPC. QMP: device_del, event DEVICE_DELETED, netdev_del.
func (l *api) UnplugNIC(ctx context.Context, req *pb.UnplugNICRequest) (*pb.UnplugNICResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	ctx, cancel := unplugContext(ctx)
	defer cancel()
	if err := d.vm.RemoveNIC(ctx, req.GetId()); err != nil {
		return nil, fmt.Errorf("unplug nic: %w", err)
	}
	d.dropTap(req.GetId())
	d.deviceEvent(pb.DeviceEvent_KIND_NIC, pb.DeviceEvent_ACTION_REMOVED, req.GetId())
	return &pb.UnplugNICResponse{}, nil
}

// unplugContext bounds an unplug's wait for the guest: unplugTimeout, or a little less than the
// caller's deadline, so that a guest still holding the device is answered as ErrUnplugPending
// (the request stays pending; the caller asks again later) before the caller gives up.
func unplugContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(-unplugReplyMargin))
	}
	return context.WithTimeout(ctx, unplugTimeout)
}
