package controllers

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/migration"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu"
)

// MigrationNet is how a node agent reaches the other nodes' agents for live migration: the
// node's address and sockets on it (in the node's network namespace). QEMU only ever sees a
// unix socket in its run folder; the agents relay the stream between the node addresses
// (network/relay), as KubeVirt's virt-handler migration proxy does.
type MigrationNet struct {
	// Addr is this node's address (published as targetNodeAddress).
	Addr netip.Addr
	// Listen opens a TCP listener on addr ("ip:port") on this node.
	Listen func(addr string) (net.Listener, error)
	// Dial connects to another node's agent at addr from this node.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// TLS encrypts the relays' streams between the nodes (this node's certificate from the
	// cluster's migration CA); nil: the node has no certificate, and only migrations the
	// configuration sends in plaintext (disableTLS) run.
	TLS MigrationTLS
}

// nbdPort is the value of targetDirectMigrationNodePorts that says a node port relays the disk
// copy (KubeVirt's LibvirtBlockMigrationPort); 0 says the memory stream.
const nbdPort = 49153

// migrationTLS is the TLS of the vmi's migration streams between the relays, nil for
// plaintext (disableTLS).
func (r *VMIReconciler) migrationTLS(vmi *vmletv1.VirtualMachineInstance) (MigrationTLS, error) {
	if *migrationConfig(vmi).DisableTLS {
		return nil, nil
	}
	if r.Migration == nil || r.Migration.TLS == nil {
		return nil, fmt.Errorf("node %s has no migration certificate (the migration configuration's disableTLS: true sends migrations in plaintext)", r.NodeName)
	}
	return r.Migration.TLS, nil
}

// migrationRun is one migration this agent drives for a vmi, as source or target: the
// goroutine that waits on the launcher, what it has seen, and how it ended. Reconciles read it;
// only the goroutine writes it (under mu).
type migrationRun struct {
	migration types.UID // the VirtualMachineInstanceMigration's
	source    bool
	received  bool // target: disks are copied in, so the guest waits for ResumeTarget
	// listen is what a target run tells the source in the migration state (its address, the
	// relays' ports, its launcher): set again on every pass while the run lasts, since the
	// write of the pass that started the run may have been refused (a conflict).
	listen *targetListen
	cancel context.CancelFunc
	stop   func() // closes the relay

	mu       sync.Mutex
	started  time.Time // source: QEMU accepted the migration
	status   MigrationStatus
	read     time.Time // when status was read
	ended    bool
	err      error
	abortMsg string // why the run cancelled the migration itself (a timeout)
	// pausedGuest: the run paused the guest to let the migration converge
	// (allowWorkloadDisruption).
	pausedGuest bool
	// postCopy: the run switched the migration to post-copy (allowPostCopy): the guest runs on
	// the target and the migration can no longer be undone.
	postCopy bool
}

// targetListen is where a migration target listens (see migrationRun.listen).
type targetListen struct {
	addr  string
	ports map[string]int
	pod   string
}

// apply records l in ms.
func (l *targetListen) apply(ms *vmletv1.VirtualMachineInstanceMigrationState) {
	ms.TargetNodeAddress = l.addr
	ms.TargetDirectMigrationNodePorts = maps.Clone(l.ports)
	ms.TargetNodeDomainDetected = true
	ms.TargetPod = l.pod
}

// runView is what a run has seen, read at once.
type runView struct {
	started time.Time // source: QEMU accepted the migration
	status  MigrationStatus
	read    time.Time // when status was read
	ended   bool
	err     error  // how it ended
	why     string // why the run cancelled the migration itself
	// pausedGuest: the run paused the guest (allowWorkloadDisruption).
	pausedGuest bool
	// postCopy: the run switched to post-copy (allowPostCopy).
	postCopy bool
}

func (m *migrationRun) snapshot() runView {
	m.mu.Lock()
	defer m.mu.Unlock()
	return runView{m.started, m.status, m.read, m.ended, m.err, m.abortMsg, m.pausedGuest, m.postCopy}
}

func (m *migrationRun) setStatus(st MigrationStatus) {
	m.mu.Lock()
	m.status, m.read = st, time.Now()
	m.mu.Unlock()
}

// migrationRun returns the vmi's migration run, nil if none.
func (r *VMIReconciler) migrationRun(uid types.UID) *migrationRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.migs[uid]
}

// startRun records and starts a run for the vmi: fn runs in its own goroutine, which wakes the
// vmi when it ends.
func (r *VMIReconciler) startRun(uid types.UID, m *migrationRun, fn func(ctx context.Context, m *migrationRun) (MigrationStatus, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	r.mu.Lock()
	if r.migs == nil {
		r.migs = map[types.UID]*migrationRun{}
	}
	r.migs[uid] = m
	r.mu.Unlock()
	go func() {
		st, err := fn(ctx, m)
		m.mu.Lock()
		if st.Status != "" {
			m.status, m.read = st, time.Now()
		}
		m.ended, m.err = true, err
		m.mu.Unlock()
		r.WakeByID(string(uid))
	}()
}

// forgetRun cancels and drops the vmi's run (its relay closes).
func (r *VMIReconciler) forgetRun(uid types.UID) {
	r.mu.Lock()
	m := r.migs[uid]
	delete(r.migs, uid)
	r.mu.Unlock()
	if m != nil {
		m.cancel()
		if m.stop != nil {
			m.stop()
		}
	}
}

// migrationRole is what this agent is to a vmi's migration.
type migrationRole int

const (
	roleNone         migrationRole = iota
	roleSource                     // the vmi runs here and a migration of it is under way
	roleSourceDone                 // the vmi left this node: remove what it had here
	roleTarget                     // the vmi is migrating to this node
	roleTargetFailed               // the migration to this node failed: remove what it made
)

// roleOf says what this node is to the vmi's current migration (pure).
func roleOf(vmi *vmletv1.VirtualMachineInstance, node string) migrationRole {
	ms := vmi.Status.MigrationState
	if ms == nil || ms.MigrationUID == "" || ms.SourceNode == ms.TargetNode {
		return roleNone
	}
	switch node {
	case ms.SourceNode:
		switch {
		case vmi.Status.NodeName != node:
			return roleSourceDone // the target took the vmi over
		case ms.Completed:
			return roleSourceDone
		case ms.Failed:
			return roleNone // the guest stays here: the ordinary reconcile
		}
		return roleSource
	case ms.TargetNode:
		switch {
		case vmi.Status.NodeName == node:
			return roleNone // taken over: the ordinary reconcile (the source says Completed)
		case ms.Failed || !vmi.DeletionTimestamp.IsZero():
			return roleTargetFailed
		case ms.Completed && ms.TargetNodeDomainReadyTimestamp != nil:
			return roleTargetFailed // completed but another node owns the vmi: not ours
		}
		return roleTarget
	}
	return roleNone
}

// postcopyLost says whether the vmi, still on node (its migration's source), lost its guest: its
// migration failed after switching to post-copy (pure).
func postcopyLost(vmi *vmletv1.VirtualMachineInstance, node string) bool {
	ms := vmi.Status.MigrationState
	return ms != nil && ms.Failed && ms.Mode == vmletv1.MigrationPostCopy && ms.SourceNode == node &&
		vmi.Status.NodeName == node && vmi.DeletionTimestamp.IsZero() && !vmistatus.IsFinal(vmi.Status.Phase)
}

// migrationConfig is the configuration of the vmi's migration as the controller resolved and
// recorded it (both nodes use the same), KubeVirt's defaults where none is recorded.
func migrationConfig(vmi *vmletv1.VirtualMachineInstance) vmletv1.MigrationConfiguration {
	cfg := vmletv1.MigrationConfiguration{}
	if ms := vmi.Status.MigrationState; ms != nil && ms.MigrationConfiguration != nil {
		cfg = *ms.MigrationConfiguration
	}
	return migration.Resolve(cfg)
}

// timeouts are a migration's limits from its configuration, the same on both nodes: the whole
// migration may take completionTimeoutPerGiB per GiB (at least one) of the guest's memory
// (spec, as translated) and of the copied emptyDisks, and may go progressTimeout without
// progress.
func timeouts(vmi *vmletv1.VirtualMachineInstance, spec *qemu.Spec, copy []translate.CopiedDisk) (completion, progress time.Duration) {
	cfg := migrationConfig(vmi)
	bytes := int64(spec.MemoryMiB) << 20
	for _, d := range copy {
		bytes += d.Bytes
	}
	gib := max(float64(bytes)/(1<<30), 1)
	completion = time.Duration(float64(*cfg.CompletionTimeoutPerGiB)*gib) * time.Second
	progress = time.Duration(*cfg.ProgressTimeout) * time.Second
	return completion, progress
}

// Migration tuning vmlet applies to every migration (KubeVirt's configuration has no field
// for them; BENCHMARKS.md, "Live migration through the API", has the measurements).
const (
	// migrationDowntime is the first downtime limit: an idle or lightly dirtying guest pauses
	// for tens of milliseconds at switchover instead of up to QEMU's default 300 ms, and
	// migrationMaxDowntime (that default, as libvirt and KubeVirt leave it) is where the limit
	// is raised to, doubling every few passes, while the migration does not converge.
	migrationDowntime    = 50 * time.Millisecond
	migrationMaxDowntime = 300 * time.Millisecond
	// migrationChannels is the number of parallel streams (QEMU's multifd) of a migration that
	// may use them.
	migrationChannels = 2
)

// migrationOptions are the QEMU options of the vmi's migration; both sides compute the same.
// Post-copy is prepared when allowed (allowPostCopy: the migration controller allows it only
// towards a node whose QEMU may use userfaultfd) and no disk is copied: with copied disks the
// target must not run before the source ended its mirrors, so such a migration stays pre-copy.
// Guest memory goes over migrationChannels parallel streams unless post-copy is prepared
// (QEMU refuses multifd with it), the bandwidth is limited (QEMU 10's multifd went 1.7× over
// a 16 MiB/s max-bandwidth here; one stream keeps to it), or, as KubeVirt decides, the vmi has
// a CPU limit (the streams' threads would compete with its vCPUs for that limit).
func migrationOptions(vmi *vmletv1.VirtualMachineInstance, copy []translate.CopiedDisk) MigrationOptions {
	cfg := migrationConfig(vmi)
	o := MigrationOptions{
		AutoConverge:         *cfg.AllowAutoConverge,
		AllowPostcopy:        *cfg.AllowPostCopy && len(copy) == 0,
		BandwidthBytesPerSec: cfg.BandwidthPerMigration.Value(),
		Downtime:             migrationDowntime,
		MaxDowntime:          migrationMaxDowntime,
	}
	if !o.AllowPostcopy && o.BandwidthBytesPerSec <= 0 && !cpuLimited(vmi) {
		o.MultifdChannels = migrationChannels
	}
	return o
}

// cpuLimited says whether the vmi's CPU is limited (pure; vmlet has no dedicated CPU
// placement, which KubeVirt exempts).
func cpuLimited(vmi *vmletv1.VirtualMachineInstance) bool {
	_, ok := vmi.Spec.Domain.Resources.Limits[vmletv1.ResourceCPU]
	return ok
}

// staleRun says whether the vmi as this pass read it (from the cache) carries an older
// migration than the run this agent drives: the API server is asked, uncached. A run of
// another migration is only replaced, and a target only removed, when the API server shows
// that migration too.
func (r *VMIReconciler) staleRun(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, m *migrationRun) bool {
	ms := vmi.Status.MigrationState
	if m == nil || ms == nil || m.migration == ms.MigrationUID {
		return false
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	fresh := &vmletv1.VirtualMachineInstance{}
	if err := reader.Get(ctx, client.ObjectKeyFromObject(vmi), fresh); err != nil {
		return true // ask again on the next pass
	}
	return fresh.Status.MigrationState != nil && fresh.Status.MigrationState.MigrationUID == m.migration
}

// stopMigrations ends this agent's part in every migration, as the agent's exit would: the
// relays close (the streams through them break) and the runs stop following their launchers.
// The launchers and QEMU are untouched; the next agent resolves what they were doing.
func (r *VMIReconciler) stopMigrations() {
	r.mu.Lock()
	uids := make([]types.UID, 0, len(r.migs))
	for uid := range r.migs {
		uids = append(uids, uid)
	}
	r.mu.Unlock()
	for _, uid := range uids {
		r.forgetRun(uid)
	}
}

// disruptionAllowed says whether the vmi's migration may pause the guest to finish
// (allowWorkloadDisruption).
func disruptionAllowed(vmi *vmletv1.VirtualMachineInstance) bool {
	return *migrationConfig(vmi).AllowWorkloadDisruption
}

// gone handles a vmi deleted from the API: a migration target this agent prepared for it (no
// finalizer of this node kept the vmi) is removed.
func (r *VMIReconciler) gone(ctx context.Context, key types.NamespacedName) error {
	r.mu.Lock()
	var uid types.UID
	for u, k := range r.keys {
		if k == key {
			uid = u
		}
	}
	r.mu.Unlock()
	if uid == "" {
		return nil
	}
	stub := &vmletv1.VirtualMachineInstance{}
	stub.Namespace, stub.Name, stub.UID = key.Namespace, key.Name, uid
	if err := r.leaveNode(ctx, stub); err != nil {
		return err // kept: the retry (controller-runtime's back-off) finds the VMI's UID again
	}
	r.mu.Lock()
	delete(r.keys, uid)
	delete(r.wrote, uid)
	r.mu.Unlock()
	return nil
}
