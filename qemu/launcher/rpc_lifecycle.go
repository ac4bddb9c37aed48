package launcher

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// active returns the running domain, or ErrNoDomain / ErrQEMUExited.
func (l *Launcher) active() (*domain, error) {
	d := l.domain()
	if d == nil {
		return nil, ErrNoDomain
	}
	if !d.running() {
		return nil, ErrQEMUExited
	}
	return d, nil
}

// Sync implements the Sync RPC.
func (l *api) Sync(ctx context.Context, req *pb.SyncRequest) (*pb.SyncResponse, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if d := l.domain(); d != nil {
		if d.migratingIn() {
			return nil, fmt.Errorf("sync: %w: this launcher is a migration target whose migration has not completed", ErrWrongState)
		}
		if !sameDomain(d.spec, req.GetSpec()) {
			return nil, fmt.Errorf("sync: %w: %s runs with another spec (use the hotplug calls)", ErrDomainExists, d.info.Name)
		}
		if !d.running() {
			return nil, fmt.Errorf("sync: %w", ErrQEMUExited)
		}
		return &pb.SyncResponse{Domain: d.snapshot(), Started: false}, nil
	}
	d, err := l.startDomain(ctx, req.GetSpec(), false)
	if err != nil {
		return nil, err
	}
	return &pb.SyncResponse{Domain: d.snapshot(), Started: true}, nil
}

// sameDomain reports whether a and b define the same domain. start_paused says how a domain
// started, not what it is: a domain started paused and resumed since is still the one an agent
// syncs later without the flag.
func sameDomain(a, b *pb.DomainSpec) bool {
	if a.GetStartPaused() == b.GetStartPaused() {
		return proto.Equal(a, b)
	}
	c, ok := proto.Clone(b).(*pb.DomainSpec)
	if !ok {
		return false
	}
	c.StartPaused = a.GetStartPaused()
	return proto.Equal(a, c)
}

// Pause implements the Pause RPC (QMP stop).
func (l *api) Pause(ctx context.Context, _ *pb.PauseRequest) (*pb.PauseResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if err := d.claims.during("STOP", func() error { return d.vm.Pause(ctx) }); err != nil {
		d.refresh("pause") // the command may have run (a timeout): read what it left
		return nil, fmt.Errorf("pause: %w", err)
	}
	d.commanded("paused", "pause")
	return &pb.PauseResponse{Domain: d.snapshot()}, nil
}

// Unpause implements the Unpause RPC (QMP cont).
func (l *api) Unpause(ctx context.Context, _ *pb.UnpauseRequest) (*pb.UnpauseResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if left, st := d.leftForTarget(); left {
		return nil, fmt.Errorf("unpause: %w: the guest left for the migration target (outgoing migration %s): it cannot run here again", ErrWrongState, st)
	}
	if err := d.claims.during("RESUME", func() error { return d.vm.Resume(ctx) }); err != nil {
		d.refresh("unpause")
		return nil, fmt.Errorf("unpause: %w", err)
	}
	d.commanded("running", "unpause")
	return &pb.UnpauseResponse{Domain: d.snapshot()}, nil
}

// Shutdown implements the Shutdown RPC: ACPI, grace, quit, kill; it returns once QEMU exited.
func (l *api) Shutdown(ctx context.Context, req *pb.ShutdownRequest) (*pb.ShutdownResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	grace := l.cfg.GracePeriod
	if ms := req.GetGraceMs(); ms > 0 {
		grace = time.Duration(ms) * time.Millisecond
	}
	l.terminate()
	_ = d.stop(stopShutdown, grace) // failures are logged; the exit says how it ended
	ex := d.exit()
	return &pb.ShutdownResponse{Forced: ex.Code != ExitOK, Reason: ex.Reason}, nil
}

// Kill implements the Kill RPC (SIGKILL); it returns once QEMU is gone.
func (l *api) Kill(ctx context.Context, _ *pb.KillRequest) (*pb.KillResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	l.terminate()
	if err := d.stop(stopKill, 0); err != nil {
		return nil, err
	}
	return &pb.KillResponse{}, nil
}

// Reset implements the Reset RPC (QMP system_reset).
func (l *api) Reset(ctx context.Context, _ *pb.ResetRequest) (*pb.ResetResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if err := d.vm.Reset(ctx); err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	return &pb.ResetResponse{}, nil
}

// GetDomain implements the GetDomain RPC. Without a domain it answers STATE_NO_DOMAIN.
func (l *api) GetDomain(ctx context.Context, _ *pb.GetDomainRequest) (*pb.Domain, error) {
	d := l.domain()
	if d == nil {
		out := &pb.Domain{State: pb.State_STATE_NO_DOMAIN, Name: l.cfg.Name, LastEventSeq: l.events.last(), ServesDhcp: true}
		out.DhcpInterfaces, out.Leases = l.dhcp.snapshot()
		return out, nil
	}
	return d.snapshot(), nil
}

// WatchEvents implements the WatchEvents RPC: retained events after after_seq, then new ones,
// until the client goes away or the launcher ends.
func (l *api) WatchEvents(req *pb.WatchEventsRequest, stream pb.Launcher_WatchEventsServer) error {
	next := req.GetAfterSeq()
	for {
		w, err := l.events.since(next)
		if err != nil {
			return err
		}
		for _, e := range w.items {
			if err := stream.Send(e); err != nil {
				return err
			}
		}
		next = w.next
		if w.closed {
			return nil
		}
		select {
		case <-w.notify:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
	}
}
