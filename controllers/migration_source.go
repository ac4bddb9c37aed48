package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/network/relay"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage"
)

// The source's socket the launcher's QEMU migrates to, in its run folder; the agent relays it to
// the target node.
const migrationOutSocket = "migration-out.sock"

// progressEvery is the most often the migration's progress is written into the vmi's status.
const progressEvery = time.Second

// sourceStep is the source's part of a pass while a migration of the vmi, which runs here, is
// under way. handled says the pass ends here: the migration runs (the ordinary pass would read
// QEMU's switchover pause as the guest's), ended, or waits on the target after an agent
// restart. Before the migration started the ordinary pass runs, and sourceBegin at its end.
func (r *VMIReconciler) sourceStep(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (_ ctrl.Result, handled bool, _ error) {
	ms := vmi.Status.MigrationState
	run := r.migrationRun(vmi.UID)
	if run != nil && run.migration != ms.MigrationUID {
		r.forgetRun(vmi.UID) // an older migration's
		run = nil
	}
	if run == nil {
		switch {
		case ms.AbortRequested:
			r.sourceFailed(vmi, "aborted before the migration started")
			return ctrl.Result{}, true, nil
		case r.Migration == nil:
			r.sourceFailed(vmi, fmt.Sprintf("node %s has no migration network (its agent runs without one)", r.NodeName))
			return ctrl.Result{}, true, nil
		case ms.StartTimestamp != nil:
			return r.sourceAdopt(ctx, vmi)
		}
		return ctrl.Result{}, false, nil
	}
	v := run.snapshot()
	started, st, read, ended, err, why := v.started, v.status, v.read, v.ended, v.err, v.why
	if ms.StartTimestamp == nil && !started.IsZero() {
		t := metav1.NewTime(started)
		ms.StartTimestamp = &t
	}
	if v.postCopy && ms.Mode != vmletv1.MigrationPostCopy {
		ms.Mode = vmletv1.MigrationPostCopy // allowPostCopy: the guest runs on the target now
		r.Recorder.Eventf(vmi, nil, "Normal", "MigrationPostCopy", "Migrate", "the migration did not complete in time: switched to post-copy, the guest runs on node %s and pulls the rest of its memory from here (allowPostCopy)", ms.TargetNode)
	}
	if v.pausedGuest && ms.Mode != vmletv1.MigrationPaused {
		ms.Mode = vmletv1.MigrationPaused // allowWorkloadDisruption: the guest was paused to converge
		r.Recorder.Eventf(vmi, nil, "Warning", "MigrationPausedGuest", "Migrate", "the migration did not complete in time: the guest is paused until it does (allowWorkloadDisruption)")
	}
	if !read.IsZero() && (ended || ms.Progress == nil || ms.Progress.UpdateTimestamp == nil || read.Sub(ms.Progress.UpdateTimestamp.Time) >= progressEvery) {
		ms.Progress = progressOf(st, read)
	}
	if !ended {
		if ms.AbortRequested && v.postCopy {
			// Too late: the guest runs on the target (KubeVirt's abort of a post-copy fails too).
			if ms.AbortStatus != vmletv1.MigrationAbortFailed {
				ms.AbortStatus = vmletv1.MigrationAbortFailed
				r.Recorder.Eventf(vmi, nil, "Warning", "MigrationAbortFailed", "Migrate", "the migration runs in post-copy: it cannot be aborted")
			}
		} else if ms.AbortRequested {
			if err := r.cancelMigration(ctx, vmi); err != nil {
				return ctrl.Result{}, true, err
			}
		}
		switch {
		case ms.Failed && v.postCopy && vmi.Status.Phase != vmletv1.Failed:
			// The target failed while the guest ran there: it is lost.
			return ctrl.Result{}, true, r.postcopyFailed(ctx, vmi, "the target failed")
		case ms.Failed && !v.postCopy:
			// The target failed (it says so): end the stream here too.
			_ = r.cancelMigration(ctx, vmi)
		}
		r.waitForMigration(ctx, vmi)
		return ctrl.Result{RequeueAfter: progressEvery}, true, nil
	}
	// The run stays until its outcome is in the status (a write that conflicts is redone
	// from it); the next pass, no longer the source's, forgets it.
	if ms.EndTimestamp == nil {
		now := metav1.Now()
		ms.EndTimestamp = &now
	}
	if err == nil {
		ms.Completed = true
		if ms.AbortRequested {
			ms.AbortStatus = vmletv1.MigrationAbortFailed // it had completed first
		}
		return ctrl.Result{}, true, nil
	}
	if v.postCopy {
		return ctrl.Result{}, true, r.postcopyFailed(ctx, vmi, sourceFailure(err, why, false))
	}
	r.sourceFailed(vmi, sourceFailure(err, why, ms.AbortRequested))
	return ctrl.Result{}, true, nil
}

// postcopyFailed ends a migration that failed in post-copy: the guest's memory is split between
// the two nodes (the target ran the guest on the pages it had; the source held the rest), so
// neither can run it any more. The source's QEMU is stopped here, the target's by the target
// once it reads the failure, and the vmi fails (KubeVirt fails it too).
func (r *VMIReconciler) postcopyFailed(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, msg string) error {
	ms := vmi.Status.MigrationState
	now := metav1.Now()
	ms.Failed = true
	if ms.EndTimestamp == nil {
		ms.EndTimestamp = &now
	}
	if ms.FailureReason == "" || strings.HasPrefix(ms.FailureReason, "target: ") {
		ms.FailureReason = strings.TrimSuffix("source: post-copy failed: "+msg+"; "+ms.FailureReason, "; ")
	}
	if ms.AbortRequested {
		ms.AbortStatus = vmletv1.MigrationAbortFailed
	}
	if vmi.Status.Phase == vmletv1.Failed {
		return nil // said and stopped already; the vmi's final pass removes the rest
	}
	why := fmt.Sprintf("the migration to node %s failed in post-copy, the guest's memory is split between the nodes and it cannot run on either: %s", ms.TargetNode, ms.FailureReason)
	r.fail(vmi, vmistatus.ReasonMigrationPostCopyFailed, why)
	if st, err := r.Runtime.State(string(vmi.UID)); err != nil || st.Exited != nil {
		return nil // stopped already (a pass that read the vmi before it was Failed)
	}
	l, err := r.connect(ctx, vmi)
	if err != nil {
		return err // the next pass stops it (the vmi is Failed)
	}
	if ml, ok := l.(MigrationLauncher); ok {
		if err := ml.KillDomain(ctx); err != nil && !errors.Is(err, launcher.ErrNoDomain) {
			return fmt.Errorf("stop the source after a failed post-copy: %w", err)
		}
	}
	return nil
}

// sourceFailure says why the source's run failed: its own reason (a timeout) first, in words
// a person can act on, without the RPC's framing.
func sourceFailure(err error, why string, aborted bool) string {
	msg := rpcFraming.ReplaceAllString(err.Error(), "")
	switch {
	case why != "":
		return why + ": " + msg
	case aborted:
		return "aborted: " + msg
	case streamBroke(msg):
		return "the stream to the target broke (its launcher or node agent went away, or the link between the nodes failed): " + msg
	}
	return msg
}

// rpcFraming is what gRPC puts before a launcher's error message.
var rpcFraming = regexp.MustCompile(`rpc error: code = \w+ desc = `)

// streamBroke reports whether QEMU's error says the connection to the target ended under it.
func streamBroke(msg string) bool {
	for _, s := range []string{"Broken pipe", "Connection reset by peer", "Unable to write to socket"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// sourceFailed ends the migration as failed from the source's side; the guest keeps running
// here.
func (r *VMIReconciler) sourceFailed(vmi *vmletv1.VirtualMachineInstance, msg string) {
	ms := vmi.Status.MigrationState
	now := metav1.Now()
	ms.Failed = true
	if ms.EndTimestamp == nil {
		ms.EndTimestamp = &now
	}
	switch why := "source: " + msg; {
	case ms.FailureReason == "":
		ms.FailureReason = why
	case strings.HasPrefix(ms.FailureReason, "target: ") && !strings.Contains(ms.FailureReason, why):
		// The target saw the stream end; the source knows why it ended: say both, its first.
		ms.FailureReason = why + "; " + ms.FailureReason
	}
	if ms.AbortRequested {
		ms.AbortStatus = vmletv1.MigrationAbortSucceeded
	}
	r.Recorder.Eventf(vmi, nil, "Warning", "MigrationFailed", "Migrate", "the migration to node %s failed, the guest keeps running on node %s: %s", ms.TargetNode, r.NodeName, ms.FailureReason)
}

// cancelMigration cancels the outgoing migration (QMP migrate_cancel); the run sees it end.
func (r *VMIReconciler) cancelMigration(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	l, err := r.connect(ctx, vmi)
	if err != nil {
		return err
	}
	ml, ok := l.(MigrationLauncher)
	if !ok {
		return errors.New("the launcher cannot migrate")
	}
	if err := ml.CancelMigration(ctx); err != nil {
		return fmt.Errorf("cancel migration: %w", err)
	}
	return nil
}

// sourceAdopt handles a migration this agent started before it was restarted: its relay to the
// target went with the old process, so a migration still running can only fail; one that
// completed is finished (QEMU stopped).
func (r *VMIReconciler) sourceAdopt(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, bool, error) {
	st, err := r.Runtime.State(string(vmi.UID))
	if err == nil && st.Exited != nil {
		// QEMU was stopped after the migration completed (or it died): the target says which
		// by taking the vmi over or by failing the migration; its status change wakes us.
		return ctrl.Result{}, true, nil
	}
	l, err := r.connect(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	ml, ok := l.(MigrationLauncher)
	if !ok {
		return ctrl.Result{}, true, errors.New("the launcher cannot migrate")
	}
	mst, err := ml.MigrationStatus(ctx)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	m := &migrationRun{migration: vmi.Status.MigrationState.MigrationUID, source: true}
	if mst.Status == "completed" {
		r.startRun(vmi.UID, m, func(ctx context.Context, _ *migrationRun) (MigrationStatus, error) {
			return ml.FinalizeMigration(ctx, time.Minute, false)
		})
		return ctrl.Result{}, true, nil
	}
	if strings.HasPrefix(mst.Status, "postcopy") || vmi.Status.MigrationState.Mode == vmletv1.MigrationPostCopy {
		// The guest ran on the target, its stream went with the old agent's relay: lost. So
		// too when the old agent had asked for the switch and QEMU failed before it reported
		// post-copy (the source's guest was stopped for it: postcopyLost).
		return ctrl.Result{}, true, r.postcopyFailed(ctx, vmi, "the source node agent restarted during post-copy (QEMU's migration was "+mst.Status+")")
	}
	if mst.Status != "failed" && mst.Status != "cancelled" && mst.Status != "none" {
		if err := ml.CancelMigration(ctx); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	r.sourceFailed(vmi, fmt.Sprintf("the source node agent restarted during the migration (QEMU's migration was %s)", mst.Status))
	return ctrl.Result{}, true, nil
}

// sourceBegin runs at the end of an ordinary pass of a vmi that is to migrate from here: it
// publishes the domain's layout for the target and, once the target listens, starts the
// migration.
func (r *VMIReconciler) sourceBegin(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState, spec *qemu.Spec, copy []translate.CopiedDisk) error {
	ms := vmi.Status.MigrationState
	if dom.State != DomainRunning && dom.State != DomainPaused {
		return nil // not yet (or no longer) a guest to migrate
	}
	ml, ok := l.(MigrationLauncher)
	if !ok {
		r.sourceFailed(vmi, "the launcher cannot migrate")
		return nil
	}
	if ms.SourceDomain == nil {
		layout, err := ml.Layout(ctx)
		if err != nil {
			return err
		}
		markHotplugged(layout, vmi)
		ms.SourceDomain = layout
		vmi.Status.Machine = &vmletv1.Machine{Type: layout.Machine}
		return nil // the target reads it from the status this pass writes
	}
	addr, ok := targetAddr(ms, 0)
	if !ok {
		return nil // the target is not listening yet; its status change wakes us
	}
	nbdAddr, ok := targetAddr(ms, nbdPort)
	if len(copy) > 0 && !ok {
		r.sourceFailed(vmi, "the target offers no port for the disk copy")
		return nil
	}
	var cliTLS *tls.Config
	if mt, err := r.migrationTLS(vmi); err != nil {
		r.sourceFailed(vmi, err.Error())
		return nil
	} else if mt != nil {
		ip, err := netip.ParseAddr(ms.TargetNodeAddress)
		if err != nil {
			r.sourceFailed(vmi, fmt.Sprintf("the target's address %q: %v", ms.TargetNodeAddress, err))
			return nil
		}
		if cliTLS, err = mt.Client(ip); err != nil {
			r.sourceFailed(vmi, "migration certificate: "+err.Error())
			return nil
		}
	}
	completion, progress := timeouts(vmi, spec, copy)
	m := &migrationRun{migration: ms.MigrationUID, source: true}
	opts := migrationOptions(vmi, copy)
	dir := r.Runtime.Dir(string(vmi.UID))
	out, err := r.relayOut(vmi, filepath.Join(dir, migrationOutSocket), addr, cliTLS)
	if err != nil {
		return err
	}
	stops := []func(){out}
	nbdURI := ""
	if len(copy) > 0 {
		sock := filepath.Join(dir, migrationNBDSocket)
		stop, err := r.relayOut(vmi, sock, nbdAddr, cliTLS)
		if err != nil {
			out()
			return err
		}
		stops, nbdURI = append(stops, stop), "unix:"+sock
	}
	m.stop = func() {
		for _, s := range stops {
			s()
		}
	}
	uri := "unix:" + filepath.Join(dir, migrationOutSocket)
	// The relays stay until the run's outcome is in the status (forgetRun stops them): the
	// target sees the stream end only after the source said why it ended.
	og := outgoing{uri: uri, opts: opts, nbdURI: nbdURI, copy: copy, completion: completion, progress: progress,
		wake: func() { r.WakeByID(string(vmi.UID)) }, cut: m.stop}
	if opts.AllowPostcopy {
		og.postcopy = ml.StartPostcopy
	}
	og.pause = func(ctx context.Context) error { _, err := l.Pause(ctx); return err }
	og.unpause = func(ctx context.Context) error { _, err := l.Unpause(ctx); return err }
	og.disrupt = disruptionAllowed(vmi)
	if og.hold = dom.State == DomainRunning && qemu.LiveMigrationLosesWrites(dom.Accel, dom.QEMUVersion); og.hold {
		r.Recorder.Eventf(vmi, nil, "Normal", "MigrationStopAndCopy", "Migrate", "the guest runs under %s in QEMU %s, whose live migration loses guest writes (fixed in QEMU 9.0): its vCPUs are stopped for the transfer and run again on node %s, or here if the migration fails", dom.Accel, dom.QEMUVersion, ms.TargetNode)
	}
	r.startRun(vmi.UID, m, func(ctx context.Context, m *migrationRun) (MigrationStatus, error) {
		return migrateOut(ctx, ml, m, og)
	})
	return nil
}

// The source's socket the launcher's disk mirrors connect to.
const migrationNBDSocket = "migration-nbd.sock"

// relayOut listens on a unix socket for the vmi's QEMU and relays what connects to addr on
// another node, over TLS with cliTLS (the handshake done before QEMU's first byte is sent);
// it returns the relay's stop.
func (r *VMIReconciler) relayOut(vmi *vmletv1.VirtualMachineInstance, sock, addr string, cliTLS *tls.Config) (func(), error) {
	ln, err := r.listenForQEMU(vmi, sock)
	if err != nil {
		return nil, err
	}
	dial := r.Migration.Dial
	rel := relay.Start(ln, func(ctx context.Context) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err != nil || cliTLS == nil {
			return c, err
		}
		tc := tls.Client(c, cliTLS)
		hctx, cancel := context.WithTimeout(ctx, relay.HandshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("migration tls with %s: %w", addr, err)
		}
		return tc, nil
	})
	return func() {
		_ = rel.Close()
		_ = os.Remove(sock)
	}, nil
}

// targetAddr is where the target listens for what its node port relays to ("ip:port"): to is 0
// for the memory stream, nbdPort for the disk copy.
func targetAddr(ms *vmletv1.VirtualMachineInstanceMigrationState, to int) (string, bool) {
	if ms.TargetNodeAddress == "" {
		return "", false
	}
	for port, t := range ms.TargetDirectMigrationNodePorts {
		if t == to {
			return net.JoinHostPort(ms.TargetNodeAddress, port), true
		}
	}
	return "", false
}

// listenForQEMU listens on a unix socket the vmi's launcher (its user) may connect to.
func (r *VMIReconciler) listenForQEMU(vmi *vmletv1.VirtualMachineInstance, path string) (net.Listener, error) {
	_ = os.Remove(path) // a previous agent's
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen for the migration stream: %w", err)
	}
	owner := storage.Owner{} // root's, for root launchers
	if env := r.Env(r.Runtime.Dir(string(vmi.UID))); env.Storage.Owner != nil {
		owner = *env.Storage.Owner
	}
	if err := handSocket(path, owner); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("listen for the migration stream: %w", err)
	}
	return ln, nil
}

// outgoing is one outgoing migration as migrateOut drives it.
type outgoing struct {
	uri    string
	opts   MigrationOptions
	nbdURI string
	copy   []translate.CopiedDisk
	// completion bounds the whole migration, progress a stretch without progress.
	completion, progress time.Duration
	// postcopy switches to post-copy (allowPostCopy): a migration that reaches its completion
	// timeout goes on in post-copy instead of being paused or aborted. nil: not allowed.
	postcopy func(context.Context) error
	// pause and unpause the guest's vCPUs. With disrupt (allowWorkloadDisruption) a migration
	// that reaches its completion timeout pauses the guest to converge instead of being
	// aborted. With hold (qemu.LiveMigrationLosesWrites) the guest is paused before the
	// migration starts (stop-and-copy). A migration that fails after either resumes it.
	pause, unpause func(context.Context) error
	disrupt, hold  bool
	wake           func()
	// cut closes the relays: a cancelled migration whose QEMU has not ended it after
	// cancelCut is cut off, which ends writes a dead link blocks (QEMU's cancel shuts down only
	// its main channel; its multifd channels would wait for the link forever). nil: none.
	cut func()
}

// cancelCut is how long a cancelled migration may take to end before its relays are closed.
const cancelCut = 5 * time.Second

// migrateOut drives the outgoing migration: start it, follow its progress every second (waking
// the vmi), cancel it when it makes no progress for o.progress or runs longer than
// o.completion (when allowed, switch to post-copy then, or else pause the guest), and finalize
// it (QEMU stops once it completed). A migration in post-copy is never cancelled: the guest
// runs on the target, and the source holds the pages it has not pulled yet.
func migrateOut(ctx context.Context, ml MigrationLauncher, m *migrationRun, o outgoing) (MigrationStatus, error) {
	held := time.Now()
	if o.hold {
		pctx, done := context.WithTimeout(ctx, callPause)
		err := o.pause(pctx)
		done()
		if err != nil {
			return MigrationStatus{}, fmt.Errorf("stop the guest for a stop-and-copy migration: %w", err)
		}
	}
	release := func(err error) error {
		if !o.hold {
			return err
		}
		uctx, done := context.WithTimeout(context.Background(), callUnpause)
		defer done()
		return errors.Join(err, o.unpause(uctx))
	}
	mctx, done := context.WithTimeout(ctx, o.completion)
	err := ml.Migrate(mctx, o.uri, o.opts, o.nbdURI, o.copy) // with disks: once their mirrors are ready
	done()
	if err != nil {
		return MigrationStatus{}, release(err)
	}
	start := time.Now()
	m.mu.Lock()
	m.started = start
	m.mu.Unlock()
	o.wake()
	type result struct {
		st  MigrationStatus
		err error
	}
	fin := make(chan result, 1)
	go func() {
		// Its own bound: the whole migration may take completion, then (paused) progress more.
		st, err := ml.FinalizeMigration(ctx, o.completion+2*o.progress, false)
		fin <- result{st, err}
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	lowest, moved := int64(-1), start
	var iter int64
	paused, postcopy := false, false
	var cancelled time.Time // when cancel asked QEMU to end the migration
	cutOff := func() {
		if o.cut != nil {
			o.cut()
		}
	}
	cancel := func(why string) {
		if postcopy {
			return // no way back: the guest runs on the target
		}
		m.mu.Lock()
		first := m.abortMsg == ""
		if first {
			m.abortMsg = why
		}
		m.mu.Unlock()
		if first {
			cancelled = time.Now()
			cctx, done := context.WithTimeout(context.Background(), callCancelMigration)
			_ = ml.CancelMigration(cctx)
			done()
		}
	}
	end := func(res result) (MigrationStatus, error) {
		if res.err != nil && paused && !o.hold {
			// The guest stays here: it runs again as it did before the migration paused it.
			uctx, done := context.WithTimeout(context.Background(), callUnpause)
			res.err = errors.Join(res.err, o.unpause(uctx))
			done()
		}
		if res.err != nil && !postcopy {
			res.err = release(res.err) // a held guest runs here again (in post-copy it ran there)
		}
		if res.err == nil && o.hold {
			// QEMU counts only its own final stop; a held guest stood still all along.
			res.st.Downtime = max(res.st.Downtime, time.Since(held))
		}
		return res.st, res.err
	}
	for {
		select {
		case res := <-fin:
			return end(res)
		case <-ctx.Done():
			cancel("the agent stopped following the migration")
			var res result
			select {
			case res = <-fin:
			case <-time.After(cancelCut):
				cutOff()
				res = <-fin
			}
			res.err = errors.Join(ctx.Err(), res.err)
			return end(res)
		case now := <-tick.C:
			// An unanswered read is no progress, and the time-based decisions below still
			// apply: QEMU's monitor can be silent for long (its final stage holds QEMU's lock
			// on a write that a cut link blocks), and the finalize call reports the rest.
			if st, err := ml.MigrationStatus(ctx); err == nil {
				m.setStatus(st)
				o.wake()
				if lowest < 0 || st.Remaining < lowest || st.Iterations > iter {
					lowest, iter, moved = st.Remaining, st.Iterations, now
				}
			}
			switch {
			case !cancelled.IsZero():
				if now.Sub(cancelled) >= cancelCut {
					cutOff()
				}
			case postcopy:
				// The rest arrives on demand and in the background; FinalizeMigration's bound
				// ends a post-copy that cannot finish.
			case now.Sub(moved) >= o.progress:
				cancel("no progress for " + o.progress.String() + " (progressTimeout)")
			case now.Sub(start) >= o.completion && o.postcopy != nil:
				// allowPostCopy: the guest moves to the target now and pulls what is missing.
				pctx, done := context.WithTimeout(ctx, callStartPostcopy)
				if err := o.postcopy(pctx); err != nil {
					cancel("not completed within " + o.completion.String() + " and the switch to post-copy failed: " + err.Error())
				} else {
					postcopy, moved = true, now
					m.mu.Lock()
					m.postCopy = true
					m.mu.Unlock()
				}
				done()
			case now.Sub(start) >= o.completion && !paused && o.disrupt:
				// allowWorkloadDisruption: stop the guest so that the rest converges (a held
				// guest is stopped already).
				pctx, done := context.WithTimeout(ctx, callPause)
				if err := pauseUnlessHeld(pctx, o); err != nil {
					cancel("not completed within " + o.completion.String() + " and the guest could not be paused: " + err.Error())
				} else {
					paused, moved = true, now
					m.mu.Lock()
					m.pausedGuest = true
					m.mu.Unlock()
				}
				done()
			case now.Sub(start) >= o.completion && !paused:
				cancel("not completed within " + o.completion.String() + " (completionTimeoutPerGiB)")
			}
		}
	}
}

// progressOf is the status figure of a launcher's migration status.
func progressOf(st MigrationStatus, read time.Time) *vmletv1.MigrationProgress {
	t := metav1.NewTime(read)
	return &vmletv1.MigrationProgress{
		DataProcessedBytes: st.Transferred, DataRemainingBytes: st.Remaining, DataTotalBytes: st.Total,
		DirtyRatePagesPerSecond: st.DirtyRate, Iteration: st.Iterations,
		DowntimeMilliseconds: st.Downtime.Milliseconds(), TotalTimeMilliseconds: st.TotalTime.Milliseconds(),
		UpdateTimestamp: &t,
	}
}

// sourceDone removes what a vmi that migrated away had here. A vmi taken over while this
// agent did not follow (it was restarted) is marked completed here, the source's say; one
// deleted between the source's end and the target's take-over loses the finalizer here, as
// nobody else holds it then.
func (r *VMIReconciler) sourceDone(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	ms := vmi.Status.MigrationState
	if m := r.migrationRun(vmi.UID); m != nil && m.migration == ms.MigrationUID {
		// The target may take the vmi over before the source's run returned: keep its figures.
		v := m.snapshot()
		if !v.ended && vmi.Status.NodeName == ms.TargetNode {
			return ctrl.Result{}, nil // the run ends soon (QEMU stops): it wakes the vmi
		}
		if v.ended && v.err == nil && !v.read.IsZero() && !recorded(ms, v.status) {
			// The figures go into the status before the run (and they with it) is forgotten: a
			// write that conflicts is redone from the run.
			ms.Progress = progressOf(v.status, v.read)
			if !ms.Completed {
				now := metav1.Now()
				ms.Completed, ms.EndTimestamp = true, &now
			}
			return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
	}
	if !ms.Completed && vmi.Status.NodeName == ms.TargetNode {
		now := metav1.Now()
		ms.Completed, ms.EndTimestamp = true, &now
	}
	if err := r.leaveNode(ctx, vmi); err != nil {
		return ctrl.Result{}, err
	}
	if !vmi.DeletionTimestamp.IsZero() && vmi.Status.NodeName == r.NodeName {
		r.mu.Lock()
		delete(r.keys, vmi.UID)
		r.mu.Unlock()
		if err := patchFinalizer(ctx, r.Client, vmi, false); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, nil
}

// recorded says whether the status holds a run's final figures.
func recorded(ms *vmletv1.VirtualMachineInstanceMigrationState, st MigrationStatus) bool {
	p := ms.Progress
	return ms.Completed && p != nil && p.TotalTimeMilliseconds == st.TotalTime.Milliseconds() && p.DataProcessedBytes == st.Transferred
}

// pauseUnlessHeld pauses the guest unless the migration holds it paused already.
func pauseUnlessHeld(ctx context.Context, o outgoing) error {
	if o.hold {
		return nil
	}
	return o.pause(ctx)
}
