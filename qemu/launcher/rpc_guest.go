package launcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qga"
)

// defaultExecTimeout bounds GuestExec when the request names no timeout.
const defaultExecTimeout = 30 * time.Second

// agent returns the running domain's agent poller.
func (l *Launcher) agent() (*agentPoller, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if d.agent == nil {
		return nil, fmt.Errorf("%w: the domain has no guest agent channel", ErrAgentNotConnected)
	}
	return d.agent, nil
}

// GuestPing implements the RPC (guest-ping).
func (l *api) GuestPing(ctx context.Context, _ *pb.GuestPingRequest) (*pb.GuestPingResponse, error) {
	a, err := l.agent()
	if err != nil {
		return nil, err
	}
	if err := a.use(ctx, func(ctx context.Context, g *qga.Agent) error { return g.Ping(ctx) }); err != nil {
		return nil, fmt.Errorf("guest ping: %w", err)
	}
	return &pb.GuestPingResponse{}, nil
}

// GuestInfo implements the RPC: guest-info, guest-get-osinfo, guest-get-host-name,
// guest-network-get-interfaces, guest-get-users, guest-get-fsinfo, each a short command of its
// own. Commands the agent does not support are left out of the answer.
func (l *api) GuestInfo(ctx context.Context, _ *pb.GuestInfoRequest) (*pb.GuestInfoResponse, error) {
	a, err := l.agent()
	if err != nil {
		return nil, err
	}
	var out *pb.GuestInfoResponse
	err = a.use(ctx, func(ctx context.Context, g *qga.Agent) (err error) {
		out, err = guestInfo(ctx, g)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("guest info: %w", err)
	}
	return out, nil
}

// guestInfo gathers GuestInfo's answer from g.
func guestInfo(ctx context.Context, g *qga.Agent) (*pb.GuestInfoResponse, error) {
	info, err := g.Info(ctx)
	if err != nil {
		return nil, err
	}
	out := &pb.GuestInfoResponse{AgentVersion: info.Version}
	if err := guestSysInfo(ctx, g, info, out); err != nil {
		return nil, err
	}
	if info.Supports("guest-get-users") {
		users, err := g.Users(ctx)
		if err != nil {
			return nil, err
		}
		for _, u := range users {
			out.Users = append(out.Users, &pb.GuestUser{Name: u.Name, Domain: u.Domain,
				LoginTimeUnixNano: int64(u.LoginTime * 1e9)})
		}
	}
	if info.Supports("guest-get-fsinfo") {
		fss, err := g.FSInfo(ctx)
		if err != nil {
			return nil, err
		}
		for _, f := range fss {
			gf := &pb.GuestFilesystem{Name: f.Name, Mountpoint: f.Mountpoint, Type: f.Type}
			if f.UsedBytes != nil {
				gf.UsedBytes = *f.UsedBytes
			}
			if f.TotalBytes != nil {
				gf.TotalBytes = *f.TotalBytes
			}
			out.Filesystems = append(out.Filesystems, gf)
		}
	}
	return out, nil
}

// guestSysInfo fills out's OS, host name and interfaces (guest-get-osinfo,
// guest-get-host-name, guest-network-get-interfaces; those info says the agent lacks are left
// out): what the launcher's poller keeps in Domain.guest_info.
func guestSysInfo(ctx context.Context, g *qga.Agent, info qga.Info, out *pb.GuestInfoResponse) error {
	if info.Supports("guest-get-osinfo") {
		os, err := g.OSInfo(ctx)
		if err != nil {
			return err
		}
		out.Os = &pb.GuestOS{
			Id: os.ID, Name: os.Name, PrettyName: os.PrettyName, Version: os.Version,
			VersionId: os.VersionID, KernelRelease: os.KernelRelease, KernelVersion: os.KernelVersion,
			Machine: os.Machine,
		}
	}
	if info.Supports("guest-get-host-name") {
		var h struct {
			Name string `json:"host-name"`
		}
		if err := g.Execute(ctx, "guest-get-host-name", nil, &h); err != nil {
			return err
		}
		out.Hostname = h.Name
	}
	if info.Supports("guest-network-get-interfaces") {
		ifs, err := g.NetworkInterfaces(ctx)
		if err != nil {
			return err
		}
		for _, i := range ifs {
			gi := &pb.GuestInterface{Name: i.Name, Mac: i.HardwareAddress}
			for _, ip := range i.IPAddresses {
				gi.IpAddresses = append(gi.IpAddresses, ip.Address+"/"+strconv.Itoa(ip.Prefix))
			}
			out.Interfaces = append(out.Interfaces, gi)
		}
	}
	return nil
}

// GuestExec implements the RPC: guest-exec, which qemu-ga runs asynchronously (it returns the
// guest pid at once), then guest-exec-status polls until the process exited (qga.Agent.Wait).
// Each is a short command of its own, so the agent answers pings and other RPCs while the
// process runs. When the request's timeout (default 30 s) passes first, GuestExec returns
// ErrExecTimeout with the guest pid and the process keeps running: qemu-ga cannot kill it. The
// poller then reads its status after it exits (agentPoller.reap), so that qemu-ga frees it.
func (l *api) GuestExec(ctx context.Context, req *pb.GuestExecRequest) (*pb.GuestExecResponse, error) {
	a, err := l.agent()
	if err != nil {
		return nil, err
	}
	if req.GetPath() == "" {
		return nil, fmt.Errorf("guest exec: %w: path missing", ErrInvalidRequest)
	}
	timeout := defaultExecTimeout
	if ms := req.GetTimeoutMs(); ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := a.exec(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("guest exec %s: %w", req.GetPath(), err)
	}
	return &pb.GuestExecResponse{ExitCode: int32(st.ExitCode), Signal: int32(st.Signal), Stdout: st.Stdout, Stderr: st.Stderr}, nil
}

// exec runs req's program with the agent until ctx ends (use, guestExec); a process that
// outlives ctx is handed to reap.
func (a *agentPoller) exec(ctx context.Context, req *pb.GuestExecRequest) (st qga.ExecStatus, err error) {
	err = a.use(ctx, func(ctx context.Context, g *qga.Agent) (err error) {
		st, err = guestExec(ctx, g, req)
		return err
	})
	if pe, ok := errors.AsType[*guestPIDError](err); ok {
		a.abandon(pe.pid)
	}
	return st, err
}

// guestExec starts req's program with g and waits for it to exit, until ctx ends: then the
// error carries the guest pid, and is ErrExecTimeout if ctx's deadline ended the wait.
func guestExec(ctx context.Context, g *qga.Agent, req *pb.GuestExecRequest) (qga.ExecStatus, error) {
	pid, err := g.Exec(ctx, req.GetPath(), req.GetArgs(), req.GetInput())
	if err != nil {
		return qga.ExecStatus{}, err
	}
	st, err := g.Wait(ctx, pid)
	if errors.Is(err, qga.ErrStillRunning) {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrExecTimeout, err)
		}
		return st, &guestPIDError{pid: pid, err: err}
	}
	return st, err
}
