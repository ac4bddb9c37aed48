package launcher

import (
	"context"
	"fmt"
	"strings"

	"github.com/vmlet/vmlet/qemu"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Migration of node-local disks (non-shared storage): the target serves the disks it receives
// over NBD (PrepareMigrationTarget.receive_disks), the source mirrors them into it before the
// memory migration (Migrate.mirror_disks) and ends the mirrors after completion
// (FinalizeMigration); only then does the agent let the target run (ResumeMigrationTarget).

// exportDisks starts the target's NBD server for req's receive_disks and returns its URI.
func (l *api) exportDisks(ctx context.Context, d *domain, req *pb.PrepareMigrationTargetRequest) (string, error) {
	if o := req.GetOptions(); o.GetPostcopy() || o.GetAllowPostcopy() {
		return "", fmt.Errorf("%w: post-copy with received disks: the target cannot run before the source ended its mirrors", ErrInvalidRequest)
	}
	uri := req.GetNbdListenUri()
	if uri == "" {
		uri = "unix:" + l.paths.NBDSocket()
	}
	path, ok := strings.CutPrefix(uri, "unix:")
	if !ok {
		return "", fmt.Errorf("%w: nbd listen uri %q has no unix: prefix", ErrInvalidRequest, uri)
	}
	creds := "" // with TLS the NBD server takes the migration's server creds (setupMigrationTLS ran)
	if req.GetOptions().GetTlsCredsDir() != "" {
		creds = tlsServerCredsID
	}
	if err := d.vm.ExportDisksTLS(ctx, path, req.GetReceiveDisks(), creds); err != nil {
		return "", err
	}
	return uri, nil
}

// checkMirrorRequest refuses mirror_disks without a unix nbd_uri or with post-copy, before
// Migrate changes anything.
func checkMirrorRequest(req *pb.MigrateRequest) error {
	if len(req.GetMirrorDisks()) == 0 {
		return nil
	}
	if o := req.GetOptions(); o.GetPostcopy() || o.GetAllowPostcopy() {
		return fmt.Errorf("migrate: %w: post-copy with mirror_disks: the target cannot run before the mirrors ended", ErrInvalidRequest)
	}
	if !strings.HasPrefix(req.GetNbdUri(), "unix:") {
		return fmt.Errorf("migrate: %w: mirror_disks need the target's nbd_uri (unix:), have %q", ErrInvalidRequest, req.GetNbdUri())
	}
	return nil
}

// mirrorDisks mirrors req's mirror_disks into the target's NBD server and waits until every
// mirror is ready. On failure the mirrors are gone again.
func (l *api) mirrorDisks(ctx context.Context, d *domain, req *pb.MigrateRequest) error {
	if len(req.GetMirrorDisks()) == 0 {
		return nil
	}
	path, _ := strings.CutPrefix(req.GetNbdUri(), "unix:") // checked by checkMirrorRequest
	o := qemu.MirrorOptions{NBDSocket: path}
	if opts := req.GetOptions(); opts.GetTlsCredsDir() != "" {
		// The disk copy goes over TLS as the memory stream does (setupMigrationTLS ran).
		o.TLSCreds, o.TLSHostname = tlsClientCredsID, opts.GetTlsHostname()
	}
	for _, m := range req.GetMirrorDisks() {
		o.Disks = append(o.Disks, qemu.MirrorDisk{ID: m.GetId(), Shallow: m.GetShallow()})
	}
	if err := d.vm.StartMirrors(ctx, o); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := d.vm.WaitMirrorsReady(ctx, nil); err != nil {
		d.stopMirrors()
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// stopMirrors ends the mirrors after a failure, with a deadline of its own (the request's may
// be what failed).
func (d *domain) stopMirrors() {
	ctx, cancel := context.WithTimeout(context.Background(), migrationSetupTimeout)
	defer cancel()
	if err := d.vm.StopMirrors(ctx); err != nil {
		d.l.log.Warn("stop disk mirrors", "err", err)
	}
}

// mirrorStatus is the progress of the source's disk mirrors (nil when there are none).
func (d *domain) mirrorStatus(ctx context.Context) []*pb.DiskMirrorStatus {
	if len(d.vm.Mirrors()) == 0 {
		return nil
	}
	ps, err := d.vm.MirrorStatus(ctx)
	if err != nil {
		d.l.log.Debug("mirror status", "err", err)
		return nil
	}
	out := make([]*pb.DiskMirrorStatus, 0, len(ps))
	for _, p := range ps {
		out = append(out, &pb.DiskMirrorStatus{
			Id: p.ID, Status: p.Status, Ready: p.Ready,
			CopiedBytes: uint64(max(p.Copied, 0)), TotalBytes: uint64(max(p.Total, 0)),
		})
	}
	return out
}

// ResumeMigrationTarget implements the RPC: on a target whose incoming migration completed,
// stop the NBD server (if it received disks) and resume the guest unless keep_paused. The
// agent calls it once the source's FinalizeMigration returned (the source's mirrors ended).
func (l *api) ResumeMigrationTarget(ctx context.Context, req *pb.ResumeMigrationTargetRequest) (*pb.ResumeMigrationTargetResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	if d.migrationRole() != roleTarget || d.migratingIn() {
		return nil, fmt.Errorf("resume migration target: %w: not a target whose migration completed", ErrWrongState)
	}
	if err := d.vm.StopNBDServer(ctx); err != nil {
		return nil, fmt.Errorf("resume migration target: %w", err)
	}
	if !req.GetKeepPaused() {
		if err := d.vm.Resume(ctx); err != nil {
			return nil, fmt.Errorf("resume migration target: %w", err)
		}
	}
	d.refresh("")
	return &pb.ResumeMigrationTargetResponse{}, nil
}
