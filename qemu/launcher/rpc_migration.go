package launcher

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Migration roles.
const (
	roleSource = "source"
	roleTarget = "target"
)

// Migration defaults.
const (
	// unlimitedBandwidth stands for "no limit" (QEMU's default cap is 128 MiB/s, far below
	// what a local or datacenter link does).
	unlimitedBandwidth    = 10 << 30
	defaultFinalizeWait   = 5 * time.Minute
	migrationSetupTimeout = 30 * time.Second
)

// caps and params turn the wire options into the driver's.
func migrationCaps(o *pb.MigrationOptions) qemu.MigrationCaps {
	return qemu.MigrationCaps{
		AutoConverge: o.GetAutoConverge(),
		PostcopyRAM:  o.GetPostcopy() || o.GetAllowPostcopy(),
		Multifd:      o.GetMultifdChannels() > 0,
	}
}

func migrationParams(o *pb.MigrationOptions) qemu.MigrationParams {
	p := qemu.MigrationParams{
		MaxBandwidth:    o.GetBandwidthBytesPerSec(),
		DowntimeLimit:   time.Duration(o.GetDowntimeMs()) * time.Millisecond,
		MultifdChannels: int(o.GetMultifdChannels()),
	}
	if p.MaxBandwidth <= 0 {
		p.MaxBandwidth = unlimitedBandwidth
	}
	return p
}

// PrepareMigrationTarget implements the RPC: start QEMU with -incoming defer for the spec,
// set the same capabilities as the source will, and listen.
func (l *api) PrepareMigrationTarget(ctx context.Context, req *pb.PrepareMigrationTargetRequest) (*pb.PrepareMigrationTargetResponse, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.domain() != nil {
		return nil, fmt.Errorf("prepare migration target: %w: a domain is defined already", ErrDomainExists)
	}
	uri := req.GetListenUri()
	if uri == "" {
		uri = "unix:" + l.paths.MigrationSocket()
	}
	if !strings.HasPrefix(uri, "unix:") && !strings.HasPrefix(uri, "tcp:") {
		return nil, fmt.Errorf("prepare migration target: %w: listen uri %q has neither the unix: nor the tcp: prefix", ErrInvalidRequest, uri)
	}
	d, err := l.startDomain(ctx, req.GetSpec(), true)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, migrationSetupTimeout)
	defer cancel()
	o := req.GetOptions()
	err = d.vm.SetMigrationCaps(sctx, migrationCaps(o))
	if err == nil && o.GetMultifdChannels() > 0 {
		err = d.vm.SetMigrationParams(sctx, qemu.MigrationParams{MultifdChannels: int(o.GetMultifdChannels())})
	}
	if err == nil {
		err = setupMigrationTLS(sctx, d.vm, o, qemu.TLSServer, uri)
	}
	var nbdURI string
	if err == nil && len(req.GetReceiveDisks()) > 0 {
		nbdURI, err = l.exportDisks(sctx, d, req) // after the TLS creds: it uses them
	}
	if err == nil {
		err = d.vm.MigrateIncoming(sctx, uri)
	}
	if err != nil {
		_ = d.stop(stopKill, 0) // cleanup after the failure returned below; stop logs its own
		return nil, fmt.Errorf("prepare migration target: %w", err)
	}
	if ss := req.GetSyncSpec(); ss != nil {
		d.spec = cloneSpec(ss) // what a later Sync compares with (under syncMu, as Sync)
	}
	return &pb.PrepareMigrationTargetResponse{Uri: uri, NbdUri: nbdURI}, nil
}

// Migrate implements the Migrate RPC: set capabilities and parameters, start the migration,
// and switch to post-copy right away when asked.
func (l *api) Migrate(ctx context.Context, req *pb.MigrateRequest) (*pb.MigrateResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if d.migratingIn() {
		return nil, fmt.Errorf("migrate: %w: this launcher is a migration target whose migration has not completed", ErrWrongState)
	}
	if req.GetUri() == "" {
		return nil, fmt.Errorf("migrate: %w: uri missing", ErrInvalidRequest)
	}
	if err := d.vm.MigrationSafe(); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if err := checkMirrorRequest(req); err != nil {
		return nil, err
	}
	o := req.GetOptions()
	if err := d.vm.SetMigrationCaps(ctx, migrationCaps(o)); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if err := d.vm.SetMigrationParams(ctx, migrationParams(o)); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if err := setupMigrationTLS(ctx, d.vm, o, qemu.TLSClient, req.GetUri()); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	d.setMigrationRole(roleSource)
	if err := l.mirrorDisks(ctx, d, req); err != nil {
		return nil, err
	}
	if err := d.vm.Migrate(ctx, req.GetUri()); err != nil {
		d.stopMirrors()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if o.GetPostcopy() {
		if err := d.vm.StartPostcopy(ctx); err != nil {
			return nil, fmt.Errorf("migrate: start postcopy: %w", err)
		}
	} else if first, max := time.Duration(o.GetDowntimeMs())*time.Millisecond, time.Duration(o.GetMaxDowntimeMs())*time.Millisecond; first > 0 && max > first {
		go l.raiseDowntime(d, first, max)
	}
	return &pb.MigrateResponse{}, nil
}

// StartPostcopy implements the RPC (QMP migrate-start-postcopy) on a source whose migration was
// started with allow_postcopy (or postcopy).
func (l *api) StartPostcopy(ctx context.Context, _ *pb.StartPostcopyRequest) (*pb.StartPostcopyResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if d.migrationRole() != roleSource {
		return nil, fmt.Errorf("start postcopy: %w: no outgoing migration", ErrWrongState)
	}
	if err := d.vm.StartPostcopy(ctx); err != nil {
		return nil, fmt.Errorf("start postcopy: %w", err)
	}
	return &pb.StartPostcopyResponse{}, nil
}

// CancelMigration implements the RPC (QMP migrate_cancel).
func (l *api) CancelMigration(ctx context.Context, _ *pb.CancelMigrationRequest) (*pb.CancelMigrationResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if err := d.vm.CancelMigration(ctx); err != nil {
		return nil, fmt.Errorf("cancel migration: %w", err)
	}
	// The mirrors end too (the source keeps running on its own disks). Mirrors still being
	// set up by Migrate end with it: that Migrate then fails.
	if err := d.vm.StopMirrors(ctx); err != nil {
		return nil, fmt.Errorf("cancel migration: %w", err)
	}
	return &pb.CancelMigrationResponse{}, nil
}

// FinalizeMigration implements the RPC. Source: wait for completion, then quit QEMU (the
// launcher exits 0, reason "migrated"). Target: wait for completion with the guest resumed.
func (l *api) FinalizeMigration(ctx context.Context, req *pb.FinalizeMigrationRequest) (*pb.FinalizeMigrationResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	wait := defaultFinalizeWait
	if ms := req.GetTimeoutMs(); ms > 0 {
		wait = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	role := d.migrationRole()
	var info qemu.MigrationInfo
	switch role {
	case roleTarget:
		// The target QEMU never runs the guest by itself (-S): WaitIncoming resumes it as soon
		// as that is safe (post-copy start or completion) unless the source was paused. With
		// received disks it must not run before the source ended its mirrors:
		// ResumeMigrationTarget resumes it.
		receiving := len(d.vm.Exports()) > 0
		info, err = d.vm.WaitIncoming(ctx, !req.GetKeepPaused() && !receiving)
	case roleSource:
		info, err = d.vm.WaitMigration(ctx, nil)
	default:
		return nil, fmt.Errorf("finalize migration: %w: no migration", ErrWrongState)
	}
	status := migrationStatus(role, info)
	if role == roleSource {
		status.Disks = d.mirrorStatus(ctx)
		// Once the migration ended (completed: the guest is paused here; or failed/cancelled)
		// the mirrors end too. A ready mirror ended after completion leaves the target's disks
		// consistent with the guest's state. A wait that timed out leaves them running: the
		// migration may still complete and needs them. Ending them has a deadline of its own:
		// the wait may have used up the request's.
		if info.Final() {
			sctx, scancel := context.WithTimeout(context.Background(), migrationSetupTimeout)
			serr := d.vm.StopMirrors(sctx)
			scancel()
			if serr != nil {
				return &pb.FinalizeMigrationResponse{Status: status}, fmt.Errorf("finalize migration: %w", serr)
			}
		}
	}
	if err != nil {
		return &pb.FinalizeMigrationResponse{Status: status}, fmt.Errorf("finalize migration: %w", err)
	}
	d.setMigration(info.Status)
	if role == roleSource {
		l.terminate()
		if err := d.stop(stopMigrated, 0); err != nil {
			return nil, fmt.Errorf("finalize migration: stop source: %w", err)
		}
	} else {
		d.refresh("")
	}
	return &pb.FinalizeMigrationResponse{Status: status}, nil
}

// GetMigrationStatus implements the RPC (QMP query-migrate).
func (l *api) GetMigrationStatus(ctx context.Context, _ *pb.GetMigrationStatusRequest) (*pb.MigrationStatus, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	info, err := d.vm.MigrationStatus(ctx)
	if err != nil {
		return nil, fmt.Errorf("get migration status: %w", err)
	}
	st := migrationStatus(d.migrationRole(), info)
	st.Disks = d.mirrorStatus(ctx)
	return st, nil
}

func migrationStatus(role string, m qemu.MigrationInfo) *pb.MigrationStatus {
	return &pb.MigrationStatus{
		Role:             role,
		Status:           m.Status,
		Error:            m.ErrorDesc,
		TotalTimeMs:      m.TotalTime.Milliseconds(),
		DowntimeMs:       m.Downtime.Milliseconds(),
		SetupTimeMs:      m.SetupTime.Milliseconds(),
		TransferredBytes: uint64(max(m.RAMTransferred, 0)),
		RemainingBytes:   uint64(max(m.RAMRemaining, 0)),
		TotalBytes:       uint64(max(m.RAMTotal, 0)),
		DirtySyncCount:   uint64(max(m.DirtySyncCount, 0)),
		PostcopyRequests: uint64(max(m.PostcopyRequests, 0)),
		DirtyPagesRate:   m.DirtyPagesRate,
		// mbps is megabits (10^6 bits) per second.
		MemoryTransferRateBytesPerSec: uint64(max(m.Mbps, 0) * 1e6 / 8),
	}
}
