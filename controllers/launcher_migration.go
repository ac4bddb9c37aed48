package controllers

import (
	"context"
	"fmt"
	"time"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// MigrationLauncher is a launcher that plays migration source and target (grpcLauncher is).
type MigrationLauncher interface {
	// Layout is the running domain's device layout: what a target must reproduce.
	Layout(ctx context.Context) (*vmletv1.MigrationDomainLayout, error)
	// PrepareTarget starts QEMU for spec waiting for an incoming migration and returns the URI
	// (a unix socket in the launcher's run folder) the stream must reach. syncSpec is what the
	// agent will Sync afterwards. netns maps NIC ids to their taps' namespaces.
	PrepareTarget(ctx context.Context, spec, syncSpec *qemu.Spec, netns map[string]string, o MigrationOptions) (string, error)
	// Migrate starts the outgoing migration to uri.
	Migrate(ctx context.Context, uri string, o MigrationOptions) error
	// CancelMigration cancels the outgoing migration; the source keeps running.
	CancelMigration(ctx context.Context) error
	// FinalizeMigration waits until the migration completed. Source: QEMU is then stopped (the
	// launcher exits, reason "migrated"). Target: the guest is resumed unless keepPaused.
	FinalizeMigration(ctx context.Context, timeout time.Duration, keepPaused bool) (MigrationStatus, error)
	// MigrationStatus is QEMU's view of the migration now.
	MigrationStatus(ctx context.Context) (MigrationStatus, error)
}

// MigrationOptions are one migration's settings; both sides get the same.
type MigrationOptions struct {
	Postcopy             bool
	AutoConverge         bool
	BandwidthBytesPerSec int64 // 0: unlimited
}

// MigrationStatus is a launcher's migration status.
type MigrationStatus struct {
	Role, Status, Error string
	TotalTime, Downtime time.Duration
	Transferred         int64
	Remaining           int64
	Total               int64
	Iterations          int64
	DirtyRate           int64 // pages per second
}

var _ MigrationLauncher = (*grpcLauncher)(nil)

// Deadlines of the migration calls (FinalizeMigration's is its own timeout plus this).
const (
	callLayout          = 5 * time.Second
	callPrepareTarget   = time.Minute
	callMigrate         = time.Minute
	callCancelMigration = 10 * time.Second
	callMigrationStatus = 5 * time.Second
	callFinalizeSlack   = 30 * time.Second
)

func (o MigrationOptions) proto() *pb.MigrationOptions {
	return &pb.MigrationOptions{Postcopy: o.Postcopy, AutoConverge: o.AutoConverge, BandwidthBytesPerSec: o.BandwidthBytesPerSec}
}

func (g *grpcLauncher) Layout(ctx context.Context) (*vmletv1.MigrationDomainLayout, error) {
	ctx, cancel := bound(ctx, callLayout)
	defer cancel()
	d, err := g.c.GetDomain(ctx)
	if err != nil {
		return nil, fmt.Errorf("domain layout: %w", err)
	}
	s := d.GetLiveSpec()
	if s == nil {
		return nil, fmt.Errorf("domain layout: %w: the launcher runs no domain", ErrNoDomain)
	}
	return layoutOf(s), nil
}

// ErrNoDomain: the launcher has no running domain.
var ErrNoDomain = fmt.Errorf("no domain")

// layoutOf reads the device layout from a live spec.
func layoutOf(s *pb.DomainSpec) *vmletv1.MigrationDomainLayout {
	l := &vmletv1.MigrationDomainLayout{
		Machine: s.GetMachine(), CPUModel: s.GetCpu().GetModel(), HotplugPorts: s.GetHotplugPorts(), SCSI: s.GetScsi(),
	}
	for _, d := range s.GetDisks() {
		l.Devices = append(l.Devices, vmletv1.MigrationDevicePort{Kind: "disk", ID: d.GetId(), Port: d.GetPort()})
	}
	for _, n := range s.GetNics() {
		l.Devices = append(l.Devices, vmletv1.MigrationDevicePort{Kind: "nic", ID: n.GetId(), Port: n.GetPort()})
	}
	return l
}

func (g *grpcLauncher) PrepareTarget(ctx context.Context, spec, syncSpec *qemu.Spec, netns map[string]string, o MigrationOptions) (string, error) {
	ctx, cancel := bound(ctx, callPrepareTarget)
	defer cancel()
	for _, n := range spec.NICs {
		if n.TapName == "" {
			continue
		}
		if err := g.handOverTap(ctx, n, netns[n.ID]); err != nil {
			return "", fmt.Errorf("prepare migration target: %w", err)
		}
	}
	resp, err := g.c.API().PrepareMigrationTarget(ctx, &pb.PrepareMigrationTargetRequest{
		Spec: launcher.SpecToProto(spec, netns), SyncSpec: launcher.SpecToProto(syncSpec, netns), Options: o.proto(),
	})
	if err != nil {
		return "", fmt.Errorf("prepare migration target: %w", err)
	}
	return resp.GetUri(), nil
}

func (g *grpcLauncher) Migrate(ctx context.Context, uri string, o MigrationOptions) error {
	ctx, cancel := bound(ctx, callMigrate)
	defer cancel()
	return g.c.Migrate(ctx, uri, o.proto())
}

func (g *grpcLauncher) CancelMigration(ctx context.Context) error {
	ctx, cancel := bound(ctx, callCancelMigration)
	defer cancel()
	return g.c.CancelMigration(ctx)
}

func (g *grpcLauncher) FinalizeMigration(ctx context.Context, timeout time.Duration, keepPaused bool) (MigrationStatus, error) {
	ctx, cancel := bound(ctx, timeout+callFinalizeSlack)
	defer cancel()
	resp, err := g.c.API().FinalizeMigration(ctx, &pb.FinalizeMigrationRequest{TimeoutMs: timeout.Milliseconds(), KeepPaused: keepPaused})
	return migrationStatusOf(resp.GetStatus()), err
}

func (g *grpcLauncher) MigrationStatus(ctx context.Context) (MigrationStatus, error) {
	ctx, cancel := bound(ctx, callMigrationStatus)
	defer cancel()
	s, err := g.c.GetMigrationStatus(ctx)
	if err != nil {
		return MigrationStatus{}, err
	}
	return migrationStatusOf(s), nil
}

func migrationStatusOf(s *pb.MigrationStatus) MigrationStatus {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	return MigrationStatus{
		Role: s.GetRole(), Status: s.GetStatus(), Error: s.GetError(),
		TotalTime: ms(s.GetTotalTimeMs()), Downtime: ms(s.GetDowntimeMs()),
		Transferred: int64(s.GetTransferredBytes()), Remaining: int64(s.GetRemainingBytes()), Total: int64(s.GetTotalBytes()),
		Iterations: int64(s.GetDirtySyncCount()), DirtyRate: s.GetDirtyPagesRate(),
	}
}
