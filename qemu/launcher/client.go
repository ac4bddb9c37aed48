package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Client is the typed client of a launcher's API, for the node agent and vmctl. Errors from
// the launcher are *RemoteError values that unwrap to this package's sentinels
// (errors.Is(err, launcher.ErrNoDomain)). All methods are safe for concurrent use; every call
// is bounded by its context.
type Client struct {
	conn *grpc.ClientConn
	api  pb.LauncherClient
}

// Dial connects to the launcher serving socketPath (its ReadySocket) and checks that it
// answers (GetDomain) before ctx ends. opts add to the connection's options (e.g. the node
// agent's metrics interceptor).
func Dial(ctx context.Context, socketPath string, opts ...grpc.DialOption) (*Client, error) {
	return dial(ctx, socketPath, opts...)
}

// DialChecked is Dial with WithPeerCheck(check): it fails at once, with ErrNotLauncher, when
// the socket is not the launcher's.
func DialChecked(ctx context.Context, socketPath string, check PeerCheck, opts ...grpc.DialOption) (*Client, error) {
	// Not there or not listening yet: the connection waits for it, as Dial does.
	if err := CheckPeer(ctx, socketPath, check); errors.Is(err, ErrNotLauncher) {
		return nil, err // it names the socket
	}
	return dial(ctx, socketPath, append(opts, WithPeerCheck(check))...)
}

func dial(ctx context.Context, socketPath string, opts ...grpc.DialOption) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+socketPath, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()), // a 0600 unix socket
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16 << 20)),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial launcher %s: %w", socketPath, err)
	}
	c := &Client{conn: conn, api: pb.NewLauncherClient(conn)}
	if _, err := c.api.GetDomain(ctx, &pb.GetDomainRequest{}, grpc.WaitForReady(true)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial launcher %s: %w", socketPath, fromStatus(err))
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// API returns the generated client, for calls this wrapper does not cover. Its errors are raw
// gRPC statuses.
func (c *Client) API() pb.LauncherClient { return c.api }

// Sync defines and starts the domain; the same spec again is a no-op (started false).
func (c *Client) Sync(ctx context.Context, spec *pb.DomainSpec) (*pb.SyncResponse, error) {
	r, err := c.api.Sync(ctx, &pb.SyncRequest{Spec: spec})
	return r, wrap("sync", err)
}

// Pause stops the guest's vCPUs.
func (c *Client) Pause(ctx context.Context) (*pb.Domain, error) {
	r, err := c.api.Pause(ctx, &pb.PauseRequest{})
	return r.GetDomain(), wrap("pause", err)
}

// Unpause resumes the guest's vCPUs.
func (c *Client) Unpause(ctx context.Context) (*pb.Domain, error) {
	r, err := c.api.Unpause(ctx, &pb.UnpauseRequest{})
	return r.GetDomain(), wrap("unpause", err)
}

// Shutdown powers the guest off: ACPI, up to grace (0: the launcher's default), then quit
// and kill. It returns once QEMU exited; the launcher exits afterwards.
func (c *Client) Shutdown(ctx context.Context, grace time.Duration) (*pb.ShutdownResponse, error) {
	r, err := c.api.Shutdown(ctx, &pb.ShutdownRequest{GraceMs: grace.Milliseconds()})
	return r, wrap("shutdown", err)
}

// Kill kills QEMU at once.
func (c *Client) Kill(ctx context.Context) error {
	_, err := c.api.Kill(ctx, &pb.KillRequest{})
	return wrap("kill", err)
}

// Reset hard-resets the guest.
func (c *Client) Reset(ctx context.Context) error {
	_, err := c.api.Reset(ctx, &pb.ResetRequest{})
	return wrap("reset", err)
}

// GetDomain reports the domain.
func (c *Client) GetDomain(ctx context.Context) (*pb.Domain, error) {
	r, err := c.api.GetDomain(ctx, &pb.GetDomainRequest{})
	return r, wrap("get domain", err)
}

// WatchEvents calls fn for every event after afterSeq, in order, until ctx ends (returns
// ctx's error), fn returns an error (returned as is), or the launcher ends the stream
// (returns nil: the launcher is exiting).
func (c *Client) WatchEvents(ctx context.Context, afterSeq uint64, fn func(*pb.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.api.WatchEvents(ctx, &pb.WatchEventsRequest{AfterSeq: afterSeq})
	if err != nil {
		return wrap("watch events", err)
	}
	return receive(ctx, "watch events", s, fn)
}

// receive hands each message of a server stream to fn until the launcher ends the stream
// (nil), ctx ends (ctx's error), the stream fails (wrapped with op) or fn fails (as is).
func receive[T any](ctx context.Context, op string, s interface{ Recv() (T, error) }, fn func(T) error) error {
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return wrap(op, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
}

// HotplugDisk attaches a disk.
func (c *Client) HotplugDisk(ctx context.Context, d *pb.Disk) error {
	_, err := c.api.HotplugDisk(ctx, &pb.HotplugDiskRequest{Disk: d})
	return wrap("hotplug disk", err)
}

// UnplugDisk detaches a disk once the guest released it.
func (c *Client) UnplugDisk(ctx context.Context, id string) error {
	_, err := c.api.UnplugDisk(ctx, &pb.UnplugDiskRequest{Id: id})
	return wrap("unplug disk", err)
}

// HotplugNIC attaches a NIC on the existing tap n.TapName in namespace n.Netns.
func (c *Client) HotplugNIC(ctx context.Context, n *pb.NIC) error {
	_, err := c.api.HotplugNIC(ctx, &pb.HotplugNICRequest{Nic: n})
	return wrap("hotplug nic", err)
}

// UnplugNIC detaches a NIC once the guest released it.
func (c *Client) UnplugNIC(ctx context.Context, id string) error {
	_, err := c.api.UnplugNIC(ctx, &pb.UnplugNICRequest{Id: id})
	return wrap("unplug nic", err)
}

// PrepareMigrationTarget starts this launcher's QEMU as the target for spec (the source's
// GetDomain().LiveSpec) and returns the URI to migrate to. listenURI "" means a unix socket
// in the run dir.
func (c *Client) PrepareMigrationTarget(ctx context.Context, spec *pb.DomainSpec, listenURI string, o *pb.MigrationOptions) (string, error) {
	r, err := c.api.PrepareMigrationTarget(ctx, &pb.PrepareMigrationTargetRequest{Spec: spec, ListenUri: listenURI, Options: o})
	return r.GetUri(), wrap("prepare migration target", err)
}

// PrepareMigrationTargetWith is PrepareMigrationTarget with every request field, e.g.
// receive_disks for a migration of node-local disks (the response's nbd_uri then goes to
// MigrateWith).
func (c *Client) PrepareMigrationTargetWith(ctx context.Context, req *pb.PrepareMigrationTargetRequest) (*pb.PrepareMigrationTargetResponse, error) {
	r, err := c.api.PrepareMigrationTarget(ctx, req)
	return r, wrap("prepare migration target", err)
}

// MigrateWith is Migrate with every request field, e.g. nbd_uri and mirror_disks.
func (c *Client) MigrateWith(ctx context.Context, req *pb.MigrateRequest) error {
	_, err := c.api.Migrate(ctx, req)
	return wrap("migrate", err)
}

// ResumeMigrationTarget stops a completed target's NBD server and resumes its guest (unless
// keepPaused); call it once the source's FinalizeMigration returned.
func (c *Client) ResumeMigrationTarget(ctx context.Context, keepPaused bool) error {
	_, err := c.api.ResumeMigrationTarget(ctx, &pb.ResumeMigrationTargetRequest{KeepPaused: keepPaused})
	return wrap("resume migration target", err)
}

// Migrate starts migrating to uri.
func (c *Client) Migrate(ctx context.Context, uri string, o *pb.MigrationOptions) error {
	_, err := c.api.Migrate(ctx, &pb.MigrateRequest{Uri: uri, Options: o})
	return wrap("migrate", err)
}

// CancelMigration cancels an outgoing migration.
func (c *Client) CancelMigration(ctx context.Context) error {
	_, err := c.api.CancelMigration(ctx, &pb.CancelMigrationRequest{})
	return wrap("cancel migration", err)
}

// StartPostcopy switches a running migration started with allow_postcopy to post-copy.
func (c *Client) StartPostcopy(ctx context.Context) error {
	_, err := c.api.StartPostcopy(ctx, &pb.StartPostcopyRequest{})
	return wrap("start postcopy", err)
}

// FinalizeMigration waits (up to timeout, 0: 5 min) for the migration to complete; the source
// then stops QEMU, the target runs the guest (use API() with keep_paused for a guest that was
// paused on the source).
func (c *Client) FinalizeMigration(ctx context.Context, timeout time.Duration) (*pb.MigrationStatus, error) {
	r, err := c.api.FinalizeMigration(ctx, &pb.FinalizeMigrationRequest{TimeoutMs: timeout.Milliseconds()})
	return r.GetStatus(), wrap("finalize migration", err)
}

// GetMigrationStatus reads query-migrate.
func (c *Client) GetMigrationStatus(ctx context.Context) (*pb.MigrationStatus, error) {
	r, err := c.api.GetMigrationStatus(ctx, &pb.GetMigrationStatusRequest{})
	return r, wrap("get migration status", err)
}

// GuestPing pings the guest agent.
func (c *Client) GuestPing(ctx context.Context) error {
	_, err := c.api.GuestPing(ctx, &pb.GuestPingRequest{})
	return wrap("guest ping", err)
}

// GuestInfo reads the guest's OS, hostname, interfaces, users and filesystems.
func (c *Client) GuestInfo(ctx context.Context) (*pb.GuestInfoResponse, error) {
	r, err := c.api.GuestInfo(ctx, &pb.GuestInfoRequest{})
	return r, wrap("guest info", err)
}

// Screenshot returns the display as a PNG with its size (QMP screendump). ErrNoDisplay
// (FailedPrecondition) when the domain has no graphics.
func (c *Client) Screenshot(ctx context.Context) (*pb.ScreenshotResponse, error) {
	// A PNG of a large graphical screen can pass gRPC's default 4 MiB receive limit (a text
	// screen is a few KiB); QEMU's largest VGA mode, uncompressed, is under 64 MiB.
	r, err := c.api.Screenshot(ctx, &pb.ScreenshotRequest{}, grpc.MaxCallRecvMsgSize(maxScreenshotBytes))
	return r, wrap("screenshot", err)
}

// maxScreenshotBytes bounds a Screenshot reply.
const maxScreenshotBytes = 64 << 20

// GuestExec runs path with args in the guest and waits for it (timeout 0: 30 s). A process
// still running at the timeout is ErrExecTimeout (RemoteError.Metadata["pid"]: its guest pid)
// and keeps running: qemu-ga cannot kill it. ErrAgentBusy: not started, the agent's channel
// was busy; retry.
func (c *Client) GuestExec(ctx context.Context, path string, args []string, input []byte, timeout time.Duration) (*pb.GuestExecResponse, error) {
	r, err := c.api.GuestExec(ctx, &pb.GuestExecRequest{Path: path, Args: args, Input: input, TimeoutMs: timeout.Milliseconds()})
	return r, wrap("guest exec", err)
}

// DomainStats reads vCPU, memory, block and network counters.
func (c *Client) DomainStats(ctx context.Context) (*pb.DomainStatsResponse, error) {
	r, err := c.api.DomainStats(ctx, &pb.DomainStatsRequest{})
	return r, wrap("domain stats", err)
}

// QMP sends a raw QMP command and returns QEMU's reply verbatim (also an error reply).
func (c *Client) QMP(ctx context.Context, command string) (string, error) {
	r, err := c.api.QMP(ctx, &pb.QMPRequest{Command: command})
	return r.GetReply(), wrap("qmp", err)
}

// QMPAs is QMP on behalf of caller (an API user), whose name the QMP log records with the
// command and its reply.
func (c *Client) QMPAs(ctx context.Context, caller, command string) (string, error) {
	r, err := c.api.QMP(ctx, &pb.QMPRequest{Command: command, Caller: caller})
	return r.GetReply(), wrap("qmp", err)
}

// QMPLog calls fn for the newest tail entries of the QMP log, then, with follow, for new ones
// until ctx ends or fn fails.
func (c *Client) QMPLog(ctx context.Context, tail int, follow bool, fn func(*pb.QMPLogEntry) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.api.QMPLog(ctx, &pb.QMPLogRequest{Tail: int32(tail), Follow: follow})
	if err != nil {
		return wrap("qmp log", err)
	}
	return receive(ctx, "qmp log", s, fn)
}

// wrap turns a gRPC error into "verb: *RemoteError".
func wrap(verb string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", verb, fromStatus(err))
}
