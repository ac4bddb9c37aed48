package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// grpcLauncher adapts the launcher's gRPC API (qemu/launcher/api/v1) to Launcher.
type grpcLauncher struct {
	conn *grpc.ClientConn
	c    pb.LauncherClient
}

var _ Launcher = (*grpcLauncher)(nil)

// DialLauncher connects to a launcher's ready socket.
func DialLauncher(_ context.Context, socket string) (Launcher, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial launcher %s: %w", socket, err)
	}
	return &grpcLauncher{conn: conn, c: pb.NewLauncherClient(conn)}, nil
}

// DefaultLauncherArgs is vmlet-launcher's command line for a run folder. A zero grace period
// (terminationGracePeriodSeconds: 0) means "stop at once"; the launcher reads 0 as its default,
// so it gets the shortest positive one.
func DefaultLauncherArgs(runDir, name string, grace time.Duration) []string {
	if grace <= 0 {
		grace = time.Millisecond
	}
	return []string{"--run-dir", runDir, "--name", name, "--grace-period", grace.String()}
}

func (g *grpcLauncher) Sync(ctx context.Context, spec *qemu.Spec, netns map[string]string) error {
	_, err := g.c.Sync(ctx, &pb.SyncRequest{Spec: launcher.SpecToProto(spec, netns)})
	return err
}

func (g *grpcLauncher) Pause(ctx context.Context) error {
	_, err := g.c.Pause(ctx, &pb.PauseRequest{})
	return err
}

func (g *grpcLauncher) Unpause(ctx context.Context) error {
	_, err := g.c.Unpause(ctx, &pb.UnpauseRequest{})
	return err
}

var domainPhases = map[pb.State]DomainPhase{
	pb.State_STATE_NO_DOMAIN:     DomainNone,
	pb.State_STATE_STARTING:      DomainStarting,
	pb.State_STATE_RUNNING:       DomainRunning,
	pb.State_STATE_PAUSED:        DomainPaused,
	pb.State_STATE_SHUTTING_DOWN: DomainShuttingDown,
	pb.State_STATE_SHUTOFF:       DomainShutoff,
	pb.State_STATE_CRASHED:       DomainCrashed,
	pb.State_STATE_MIGRATING_IN:  DomainMigratingIn,
}

func (g *grpcLauncher) Domain(ctx context.Context) (DomainState, error) {
	d, err := g.c.GetDomain(ctx, &pb.GetDomainRequest{})
	if err != nil {
		return DomainState{}, err
	}
	phase, ok := domainPhases[d.GetState()]
	if !ok {
		return DomainState{}, fmt.Errorf("get domain: unknown state %v", d.GetState())
	}
	return DomainState{
		State:          phase,
		Reason:         d.GetReason(),
		Accel:          d.GetAccel(),
		AccelReason:    d.GetAccelReason(),
		QEMUVersion:    d.GetQemuVersion(),
		Pid:            int(d.GetPid()),
		AgentConnected: d.GetAgentConnected(),
	}, nil
}

func (g *grpcLauncher) Watch(ctx context.Context, notify func()) error {
	stream, err := g.c.WatchEvents(ctx, &pb.WatchEventsRequest{})
	if err != nil {
		return fmt.Errorf("watch events: %w", err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("watch events: %w", err)
		}
		notify()
	}
}

func (g *grpcLauncher) Close() error { return g.conn.Close() }
