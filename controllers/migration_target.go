package controllers

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/lifecycle"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/network"
	"github.com/vmlet/vmlet/network/relay"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage"
)

// targetStep is the target's pass for a vmi migrating to this node: storage, network and a
// launcher as for a start, then a QEMU waiting for the stream with the source's layout, a relay
// from this node's address to it, and the address published in migrationState; once the stream
// completed and the guest runs here, the vmi is taken over (status.nodeName). The vmi's other
// status (phase, Ready, launcher) stays the source's until then: the steps that would write it
// act on a scratch copy.
func (r *VMIReconciler) targetStep(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	ms := vmi.Status.MigrationState
	id := string(vmi.UID)
	run := r.migrationRun(vmi.UID)
	if run != nil && run.migration != ms.MigrationUID {
		r.forgetRun(vmi.UID)
		run = nil
	}
	if m := run; m != nil {
		if m.listen != nil {
			m.listen.apply(ms) // again: the pass that started the run may not have written it
		}
		v := run.snapshot()
		st, ended, err := v.status, v.ended, v.err
		if !ended {
			return ctrl.Result{}, nil // the run wakes the vmi when the stream ends
		}
		// The run stays until the take-over is in the status (a write that conflicts is redone
		// from it): the next pass, the ordinary one, forgets it.
		if err != nil {
			if ls, serr := r.Runtime.State(id); serr == nil && ls.Exited != nil {
				r.targetFailed(vmi, "the target launcher exited during the migration: "+exitText(ls.Exited))
				return ctrl.Result{}, nil
			}
			if status.Code(err) == codes.Unavailable {
				// Its pod's exit may not be reported yet (cluster mode): the socket says enough.
				r.targetFailed(vmi, fmt.Sprintf("the target launcher went away during the migration (its process ended or was killed): %v", err))
				return ctrl.Result{}, nil
			}
			r.targetFailed(vmi, fmt.Sprintf("incoming migration (%s): %v", st.Status, err))
			return ctrl.Result{}, nil
		}
		if m.received {
			if !ms.Completed {
				return ctrl.Result{}, nil // the source ends its disk mirrors, then says completed
			}
			if err := r.resumeTarget(ctx, vmi); err != nil {
				return ctrl.Result{}, err // retried: the guest waits paused, its disks in sync
			}
		}
		now := metav1.Now()
		ms.TargetNodeDomainReadyTimestamp = &now
		vmi.Status.NodeName = r.NodeName // from here on the ordinary reconcile of this node
		// What names the node names this node's: the QEMU (status.launcher) and the addresses
		// the guest is reachable at, under masquerade this node's pod's. A client reading the
		// vmi after the migration must not find the source's. The guest kept its leases (its
		// agent is not asked: the ordinary passes confirm them); a launcher that cannot be read
		// now is written by the next pass.
		if l, err := r.connect(ctx, vmi); err == nil {
			if d, err := l.Domain(ctx); err == nil {
				setLauncherProcess(vmi, d)
			}
		}
		r.observeInterfaces(ctx, vmi, nil, DomainState{})
		if r.SELinux.Labels() {
			// The level this node labelled at: the source's unless the migration gave the
			// target one of its own (matchSELinuxLevelOnMigration: false).
			if c, err := r.launcherContext(vmi, 0); err == nil {
				vmi.Status.SelinuxContext = c.String()
			}
		}
		r.Recorder.Eventf(vmi, nil, "Normal", "Migrated", "Migrate", "the guest runs on node %s now", r.NodeName)
		return ctrl.Result{}, nil
	}
	if r.Migration == nil {
		r.targetFailed(vmi, fmt.Sprintf("node %s has no migration network (its agent runs without one)", r.NodeName))
		return ctrl.Result{}, nil
	}
	if ms.TargetNodeDomainDetected {
		// This agent prepared the target before it was restarted: the relay went with the old
		// process, so the stream cannot arrive. Fail it cleanly; the next pass removes it.
		r.targetFailed(vmi, "the target node agent restarted during the migration")
		return ctrl.Result{}, nil
	}
	scratch := vmi.DeepCopy() // what the start steps say of the vmi is not for its status
	reviveAbsentNICs(scratch, ms.SourceDomain)
	o := r.observe(ctx, scratch)
	switch step := lifecycle.Next(o.facts); step {
	case lifecycle.EndFromExit:
		r.targetFailed(vmi, "the target launcher exited before the migration: "+exitText(o.found.Exited))
		return ctrl.Result{}, nil
	case lifecycle.WaitForSecrets, lifecycle.WaitForNetworks, lifecycle.WaitForStorage:
		return ctrl.Result{}, nil // the operation or the object's change wakes the vmi
	case lifecycle.BackOffStorage:
		return r.waitForImage(scratch, o.backOff()), nil
	case lifecycle.ReportUntranslatable, lifecycle.FailUntranslatable:
		r.targetFailed(vmi, "the vmi does not translate on this node: "+o.translateErr.Error())
		return ctrl.Result{}, nil
	case lifecycle.FailStorage:
		r.targetFailed(vmi, "storage: "+o.storageErr.Error())
		return ctrl.Result{}, nil
	case lifecycle.EnsureLauncher:
	default:
		return ctrl.Result{}, fmt.Errorf("unknown step %s", step)
	}
	if o.facts.Storage != lifecycle.StorageReady {
		return ctrl.Result{}, nil // the storage operation's end wakes the vmi
	}
	if ms.SourceDomain == nil {
		return ctrl.Result{}, nil // the source publishes its layout; its status change wakes us
	}
	hot, err := r.targetHotDisks(vmi, o.want, ms.SourceDomain)
	switch {
	case errors.Is(err, errStoragePreparing):
		return ctrl.Result{}, nil // the storage operation's end wakes the vmi
	case err != nil:
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	}
	l, res, err := r.ensureLauncher(ctx, scratch, o)
	if l == nil {
		if st, serr := r.Runtime.State(id); serr == nil && st.Exited != nil {
			r.targetFailed(vmi, "the target launcher exited before the migration: "+exitText(st.Exited))
			return ctrl.Result{}, nil
		}
		return res, err
	}
	ml, ok := l.(MigrationLauncher)
	if !ok {
		r.targetFailed(vmi, "the launcher cannot migrate")
		return ctrl.Result{}, nil
	}
	dom, err := l.Domain(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get domain: %w", err)
	}
	if dom.State != DomainNone {
		r.targetFailed(vmi, "the target launcher runs a domain this agent did not prepare")
		return ctrl.Result{}, nil
	}
	spec := o.spec
	nics, netns, err := r.ensureNetwork(ctx, scratch, o.want, spec.NICs)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("wire the target's network: %w", err)
	}
	spec.NICs = nics
	hotNICs, hotNetns, err := r.targetHotNICs(scratch, o.want, ms.SourceDomain)
	switch {
	case errors.Is(err, errUnknownSecondary), errors.Is(err, network.ErrInvalidSpec), errors.Is(err, errNoPodNetwork):
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("wire the target's network: %w", err)
	}
	if netns == nil {
		netns = launcher.NetNS{}
	}
	for _, n := range hotNICs {
		netns[n.ID] = hotNetns
	}
	// After the hot-plugged interfaces: their DHCP service goes to the launcher too.
	if _, err := r.ensureDHCP(ctx, scratch, l, launcherDHCP{supported: dom.ServesDHCP, served: dom.DHCPServed}, false); err != nil {
		return ctrl.Result{}, fmt.Errorf("wire the target's network: %w", err)
	}
	if err := r.labelFiles(scratch, o.want.Storage, o.storageRes, o.found.Pid); err != nil {
		return ctrl.Result{}, fmt.Errorf("label the target's files: %w", err)
	}
	for _, h := range hot {
		if err := r.labelHotplug(scratch, h.plan, h.res, o.found.Pid); err != nil {
			return ctrl.Result{}, fmt.Errorf("label the target's files: %w", err)
		}
	}
	sync := *spec // the spec the launcher compares later Syncs with: hot-plugged devices are not in it
	sync.StartPaused = false
	withHot := *spec
	for _, h := range hot {
		withHot.Disks = append(slices.Clone(withHot.Disks), h.disk)
	}
	withHot.NICs = append(slices.Clone(withHot.NICs), hotNICs...)
	in, err := translate.MigrationTarget(&withHot, ms.SourceDomain)
	if err != nil {
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	}
	copied := translate.CopiedDisks(vmi, spec.Disks, o.want.Storage.DiskVolumes)
	opts := migrationOptions(vmi, copied)
	var srvTLS *tls.Config
	if mt, err := r.migrationTLS(vmi); err != nil {
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	} else if mt != nil {
		if srvTLS, err = mt.Server(); err != nil {
			r.targetFailed(vmi, "migration certificate: "+err.Error())
			return ctrl.Result{}, nil
		}
	}
	var receive []string
	for _, d := range copied {
		receive = append(receive, d.ID)
	}
	// The hot-plugged disks go to the target launcher as open files, as they went to the
	// source's (grpcLauncher.HotplugDisk): a launcher pod may not reach their paths itself.
	if dh, ok := l.(DiskHandOver); ok {
		for _, h := range hot {
			err := dh.HandOverDisk(ctx, h.disk)
			if errors.Is(err, storage.ErrOutsideRoot) { // not an image vmlet may open: never
				r.targetFailed(vmi, fmt.Sprintf("hot-plugged disk %s: %v", h.disk.ID, err))
				return ctrl.Result{}, nil
			}
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("hand the hot-plugged disk %s to the target launcher: %w", h.disk.ID, err)
			}
		}
	}
	uri, nbdURI, err := ml.PrepareTarget(ctx, in, &sync, netns, opts, receive)
	if err != nil {
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	}
	// The target's QEMU waits for the stream: refuse before it starts if this QEMU cannot give
	// the guest the CPU the source's did (the next pass removes the target).
	if err := r.checkTargetCPU(ctx, l, vmi, in.CPU.Model); err != nil {
		r.targetFailed(vmi, err.Error())
		return ctrl.Result{}, nil
	}
	ports := map[string]int{}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for to, u := range map[int]string{0: uri, nbdPort: nbdURI} {
		if to == nbdPort && len(receive) == 0 {
			continue
		}
		port, stop, err := r.relayIn(u, srvTLS)
		if err != nil {
			stopAll()
			r.targetFailed(vmi, err.Error())
			return ctrl.Result{}, nil
		}
		ports[strconv.Itoa(port)] = to
		stops = append(stops, stop)
	}
	completion, progress := timeouts(vmi, spec, copied) // the source's limits: it computes the same
	keepPaused := vmi.Spec.Paused
	pod := ms.TargetPod // cluster mode: the target launcher pod the controller made
	if pod == "" {
		pod = "launcher/" + r.NodeName // local mode: this agent's launcher process
	}
	listen := &targetListen{addr: r.Migration.Addr.String(), ports: ports, pod: pod}
	m := &migrationRun{migration: ms.MigrationUID, stop: stopAll, received: len(receive) > 0, listen: listen}
	r.startRun(vmi.UID, m, func(ctx context.Context, _ *migrationRun) (MigrationStatus, error) {
		// With disks the target stays paused after the stream: ResumeTarget, once the
		// source ended its mirrors (it says so with completed). The bound outlasts the
		// source's (completion + 2×progress from its later start: a paused guest or a
		// post-copy may go on after the completion timeout), so the source says how it ended.
		return ml.FinalizeMigration(ctx, completion+3*progress, keepPaused)
	})
	listen.apply(ms)
	return ctrl.Result{}, nil
}

// checkTargetCPU compares the target launcher's QEMU (waiting for the stream) with the
// source's as the vmi's status has it (translate.CheckTargetCPU).
func (r *VMIReconciler) checkTargetCPU(ctx context.Context, l Launcher, vmi *vmletv1.VirtualMachineInstance, model string) error {
	src := translate.QEMUBuild{}
	if s := vmi.Status.Launcher; s != nil {
		src = translate.QEMUBuild{Accel: string(s.Accelerator), Version: s.QEMUVersion}
	}
	dom, err := l.Domain(ctx)
	if err != nil {
		return fmt.Errorf("migration target: read the target's QEMU: %w", err)
	}
	return translate.CheckTargetCPU(model, src, translate.QEMUBuild{Accel: dom.Accel, Version: dom.QEMUVersion})
}

// relayIn relays a node port on this node's address into the launcher's unix socket uri; it
// returns the port and the relay's stop. With srvTLS the port speaks TLS: a peer is relayed
// to QEMU only once its handshake (its certificate from the CA) succeeded.
func (r *VMIReconciler) relayIn(uri string, srvTLS *tls.Config) (int, func(), error) {
	sock, ok := strings.CutPrefix(uri, "unix:")
	if !ok {
		return 0, nil, fmt.Errorf("the target launcher listens on %q, not a unix socket", uri)
	}
	ln, err := r.Migration.Listen(net.JoinHostPort(r.Migration.Addr.String(), "0"))
	if err != nil {
		return 0, nil, fmt.Errorf("listen for the migration: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if srvTLS != nil {
		ln = tls.NewListener(ln, srvTLS)
	}
	var d net.Dialer
	rel := relay.Start(ln, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) })
	return port, func() { _ = rel.Close() }, nil
}

// resumeTarget resumes a target that received disks, once the source finished.
func (r *VMIReconciler) resumeTarget(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	l, err := r.connect(ctx, vmi)
	if err != nil {
		return err
	}
	ml, ok := l.(MigrationLauncher)
	if !ok {
		return fmt.Errorf("the launcher cannot migrate")
	}
	return ml.ResumeTarget(ctx, vmi.Spec.Paused)
}

// targetFailed ends the migration as failed from the target's side; the source cancels its
// stream and the next pass here removes what the target had.
func (r *VMIReconciler) targetFailed(vmi *vmletv1.VirtualMachineInstance, msg string) {
	ms := vmi.Status.MigrationState
	if ms.Failed {
		return
	}
	// The run (if any) stays until the failure is in the status: the next pass, the failed
	// target's, removes it with the rest (leaveNode).
	now := metav1.Now()
	ms.Failed, ms.EndTimestamp = true, &now
	ms.FailureReason = "target: " + msg

	r.Recorder.Eventf(vmi, nil, "Warning", "MigrationFailed", "Migrate", "the migration to node %s failed: %s", r.NodeName, msg)
}

// leaveNode removes what the vmi had on this node after it left it (the source after a
// completed migration, the target after a failed one). Idempotent.
func (r *VMIReconciler) leaveNode(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	r.forgetRun(vmi.UID)
	if err := r.teardown(ctx, vmi); err != nil {
		return err
	}
	return nil
}

func exitText(ex *process.Exit) string {
	if ex == nil {
		return "unknown"
	}
	if ex.Signal != "" {
		return "ended by signal " + ex.Signal
	}
	if !ex.Known {
		return "gone without a trace"
	}
	return "exit code " + strconv.Itoa(ex.Code)
}
