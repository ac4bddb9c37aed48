package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/storage"
)

// MigrationLauncher is a launcher that plays migration source and target (grpcLauncher is).
type MigrationLauncher interface {
	// Layout is the running domain's device layout: what a target must reproduce.
	Layout(ctx context.Context) (*vmletv1.MigrationDomainLayout, error)
	// PrepareTarget starts QEMU for spec waiting for an incoming migration and returns the URIs
	// (unix sockets in the launcher's run folder) the memory stream and, with receive (disk
	// ids), the disk copies must reach. syncSpec is what the agent will Sync afterwards. netns
	// maps NIC ids to their taps' namespaces. A target that receives disks does not resume by
	// itself: ResumeTarget, once the source finished.
	PrepareTarget(ctx context.Context, spec, syncSpec *qemu.Spec, netns map[string]string, o MigrationOptions, receive []string) (uri, nbdURI string, err error)
	// Migrate starts the outgoing migration to uri, first mirroring the disks copy to nbdURI
	// (it returns once every mirror is ready and the memory migration started).
	Migrate(ctx context.Context, uri string, o MigrationOptions, nbdURI string, copy []translate.CopiedDisk) error
	// ResumeTarget stops a completed target's disk server and resumes its guest (unless
	// keepPaused).
	ResumeTarget(ctx context.Context, keepPaused bool) error
	// CancelMigration cancels the outgoing migration; the source keeps running.
	CancelMigration(ctx context.Context) error
	// FinalizeMigration waits until the migration completed. Source: QEMU is then stopped (the
	// launcher exits, reason "migrated"). Target: the guest is resumed unless keepPaused.
	FinalizeMigration(ctx context.Context, timeout time.Duration, keepPaused bool) (MigrationStatus, error)
	// MigrationStatus is QEMU's view of the migration now.
	MigrationStatus(ctx context.Context) (MigrationStatus, error)
	// StartPostcopy switches the outgoing migration (AllowPostcopy) to post-copy: the guest
	// runs on the target from then on; the migration can no longer be cancelled.
	StartPostcopy(ctx context.Context) error
	// KillDomain stops QEMU at once (the launcher exits): a source whose post-copy failed has
	// no guest left to run.
	KillDomain(ctx context.Context) error
}

// MigrationOptions are one migration's settings; both sides get the same.
type MigrationOptions struct {
	Postcopy bool
	// AllowPostcopy prepares both sides for post-copy (postcopy-ram) without switching: the
	// source switches with StartPostcopy when the pre-copy would not complete in time.
	AllowPostcopy        bool
	AutoConverge         bool
	BandwidthBytesPerSec int64 // 0: unlimited
	// Downtime is the first downtime limit, raised towards MaxDowntime while the migration
	// does not converge (source; 0: QEMU's default, 300 ms, throughout).
	Downtime, MaxDowntime time.Duration
	// MultifdChannels sends guest memory over this many parallel streams (QEMU's multifd);
	// both sides use the same. 0: one stream.
	MultifdChannels int
	// TLSCredsDir is the launcher's QEMU x509 creds folder (pki.WriteQEMUCreds); "": plaintext.
	// Node agents leave it empty: their relays encrypt between the nodes (MigrationTLS).
	TLSCredsDir string
	// TLSHostname (source) is the address the target's certificate must carry.
	TLSHostname string
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
	callResumeTarget    = 10 * time.Second
	callCancelMigration = 10 * time.Second
	callMigrationStatus = 5 * time.Second
	callStartPostcopy   = 10 * time.Second
	callKillDomain      = 30 * time.Second
	callFinalizeSlack   = 30 * time.Second
)

func (o MigrationOptions) proto() *pb.MigrationOptions {
	return &pb.MigrationOptions{Postcopy: o.Postcopy, AllowPostcopy: o.AllowPostcopy, AutoConverge: o.AutoConverge, BandwidthBytesPerSec: o.BandwidthBytesPerSec,
		TlsCredsDir: o.TLSCredsDir, TlsHostname: o.TLSHostname, DowntimeMs: o.Downtime.Milliseconds(), MaxDowntimeMs: o.MaxDowntime.Milliseconds(),
		MultifdChannels: int32(o.MultifdChannels)}
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

// ErrNoDomain says the launcher has no running domain.
var ErrNoDomain = fmt.Errorf("no domain")

// layoutOf reads the device layout from a live spec.
func layoutOf(s *pb.DomainSpec) *vmletv1.MigrationDomainLayout {
	l := &vmletv1.MigrationDomainLayout{
		Machine: s.GetMachine(), CPUModel: s.GetCpu().GetModel(), HotplugPorts: s.GetHotplugPorts(), SCSI: s.GetScsi(),
		Display:        ptr.To(s.GetGraphics()), // false from a launcher that predates graphics: it has none
		PluggedSockets: s.GetCpu().GetPluggedSockets(), MemoryRequestedMiB: s.GetMemoryHotplug().GetRequestedMib(),
	}
	for _, d := range s.GetDisks() {
		l.Devices = append(l.Devices, vmletv1.MigrationDevicePort{Kind: "disk", ID: d.GetId(), Port: d.GetPort()})
	}
	for _, n := range s.GetNics() {
		l.Devices = append(l.Devices, vmletv1.MigrationDevicePort{Kind: "nic", ID: n.GetId(), Port: n.GetPort()})
	}
	return l
}

// markHotplugged marks the layout's devices that were plugged into the running guest: the
// disks of the vmi's hotpluggable volumes (and the interfaces of its secondary networks,
// which the agent always plugs). Pure.
func markHotplugged(l *vmletv1.MigrationDomainLayout, vmi *vmletv1.VirtualMachineInstance) {
	hot := map[string]bool{}
	for i := range vmi.Spec.Volumes {
		if v := &vmi.Spec.Volumes[i]; v.Hotpluggable() {
			hot["disk/"+storage.DiskID(v.Name)] = true
		}
	}
	for _, n := range vmi.Spec.Networks {
		if n.Multus != nil {
			hot["nic/"+translate.NICID(n.Name)] = true
		}
	}
	for i := range l.Devices {
		d := &l.Devices[i]
		d.Hotplugged = hot[d.Kind+"/"+d.ID]
	}
}

func (g *grpcLauncher) PrepareTarget(ctx context.Context, spec, syncSpec *qemu.Spec, netns map[string]string, o MigrationOptions, receive []string) (string, string, error) {
	ctx, cancel := bound(ctx, callPrepareTarget)
	defer cancel()
	for _, n := range spec.NICs {
		if n.TapName == "" {
			continue
		}
		if err := g.handOverTap(ctx, n, netns[n.ID]); err != nil {
			return "", "", fmt.Errorf("prepare migration target: %w", err)
		}
	}
	resp, err := g.c.PrepareMigrationTargetWith(ctx, &pb.PrepareMigrationTargetRequest{
		Spec: launcher.SpecToProto(spec, netns), SyncSpec: launcher.SpecToProto(syncSpec, netns), Options: o.proto(),
		ReceiveDisks: receive,
	})
	if err != nil {
		return "", "", err
	}
	return resp.GetUri(), resp.GetNbdUri(), nil
}

// Migrate has the caller's deadline: with disks it lasts as long as their copy.
func (g *grpcLauncher) Migrate(ctx context.Context, uri string, o MigrationOptions, nbdURI string, copy []translate.CopiedDisk) error {
	req := &pb.MigrateRequest{Uri: uri, Options: o.proto(), NbdUri: nbdURI}
	for _, d := range copy {
		req.MirrorDisks = append(req.MirrorDisks, &pb.MirrorDisk{Id: d.ID, Shallow: d.Shallow})
	}
	return g.c.MigrateWith(ctx, req)
}

func (g *grpcLauncher) ResumeTarget(ctx context.Context, keepPaused bool) error {
	ctx, cancel := bound(ctx, callResumeTarget)
	defer cancel()
	return g.c.ResumeMigrationTarget(ctx, keepPaused)
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

func (g *grpcLauncher) StartPostcopy(ctx context.Context) error {
	ctx, cancel := bound(ctx, callStartPostcopy)
	defer cancel()
	return g.c.StartPostcopy(ctx)
}

func (g *grpcLauncher) KillDomain(ctx context.Context) error {
	ctx, cancel := bound(ctx, callKillDomain)
	defer cancel()
	return g.c.Kill(ctx)
}
