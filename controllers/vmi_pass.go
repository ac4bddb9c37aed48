package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/lifecycle"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage"
)

// observed is what a pass read before acting.
type observed struct {
	facts        lifecycle.Facts
	found        process.State // the launcher as the runtime found it (Exited set if it exited)
	runDir       string
	refsErr      error
	translateErr error
	want         *translate.Desired // the translation; nil when translateErr
	spec         *qemu.Spec         // to start with, once storage is ready
	storageRes   *storage.Result    // what Apply made, once storage is ready (labelled)
	storageErr   error
	claims       map[string]launcherpod.Claim // the launcher pod's claims, by name (pod runtime)
	nodeClaims   map[string]storage.Claim     // the node's own claims (Env), for statusClaims
}

func (o *observed) backOff() *PullBackOffError {
	pb, _ := errors.AsType[*PullBackOffError](o.storageErr)
	return pb
}

// observe reads what the pass decides on: the launcher's state (once: one VMI is never
// reconciled twice at a time, so nothing else starts its launcher before this pass acts), the
// Secrets, the translation, the networks and the storage. Storage is looked at (its operation
// started or its outcome read) only when it can matter: the spec translates, and the launcher
// holds a domain or everything else it needs to start is there.
func (r *VMIReconciler) observe(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) *observed {
	id := string(vmi.UID)
	o := &observed{runDir: r.Runtime.Dir(id)}
	found, stateErr := r.Runtime.State(id)
	o.found = found
	switch {
	case errors.Is(stateErr, process.ErrNotFound):
		o.facts.Launcher = lifecycle.LauncherAbsent
	case stateErr != nil:
		o.facts.Launcher = lifecycle.LauncherUnknown
	case found.Exited != nil:
		o.facts.Launcher = lifecycle.LauncherExited
		return o // ends the VMI whatever its spec and volumes look like now
	case found.Ready:
		o.facts.Launcher = lifecycle.LauncherStarted
	default:
		o.facts.Launcher = lifecycle.LauncherStarting
	}
	started := o.facts.Launcher.HoldsDomain()
	refs, err := r.readRefs(ctx, vmi, started)
	if err != nil {
		o.refsErr, o.facts.SecretsUnreadable = err, true
		return o
	}
	if o.claims, err = r.podClaims(ctx, vmi); err != nil {
		o.refsErr, o.facts.SecretsUnreadable = err, true
		return o
	}
	env := r.Env(o.runDir)
	o.nodeClaims = env.Storage.Claims
	env = withClaims(env, vmi.Namespace, o.claims)
	env.VolumeDir = r.volumeDir(vmi.UID)
	t0 := time.Now()
	o.want, err = translate.Translate(vmi, env, refs)
	r.trace(vmi.UID, TraceTranslate, t0)
	if err != nil {
		o.translateErr, o.facts.Untranslatable = err, true
		return o
	}
	if !started && r.Network != nil && r.Network.Pods != nil && len(r.Network.missingNetworks(o.want.Network)) > 0 {
		o.facts.NetworksMissing = true
		return o
	}
	o.spec, o.storageRes, o.storageErr = r.applyStorage(vmi, o.want)
	switch {
	case o.storageErr == nil:
		o.facts.Storage = lifecycle.StorageReady
	case errors.Is(o.storageErr, errStoragePreparing):
		o.facts.Storage = lifecycle.StoragePreparing
	case o.backOff() != nil:
		o.facts.Storage = lifecycle.StorageBackOff
	default:
		o.facts.Storage = lifecycle.StorageFailed
	}
	return o
}

// ensureLauncher starts the VMI's launcher or finds it ready and returns a connection to it;
// nil (with the pass's result) while it starts or when it exited.
func (r *VMIReconciler) ensureLauncher(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, o *observed) (Launcher, ctrl.Result, error) {
	id := string(vmi.UID)
	t0 := time.Now()
	cpu := launcherpod.CPURequest(vmi)
	procLabel, dirLabel := r.launcherLabels(vmi)
	disks, nodes, err := launcherDisks(o.want.Storage)
	if err != nil {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonLauncherFailed, err.Error())
		return nil, ctrl.Result{}, fmt.Errorf("start launcher: %w", err)
	}
	if o.facts.Launcher == lifecycle.LauncherAbsent {
		r.attachEarly(ctx, vmi, o.want) // the network is wired while the launcher starts
	}
	st, err := r.Runtime.Ensure(ctx, process.Spec{
		// SELinux (local mode; gated on an enabled SELinux for the process label).
		ProcessLabel: procLabel, DirLabel: dirLabel,
		ID:           id,
		Name:         vmi.Namespace + "/" + vmi.Name,
		Args:         r.Args(o.runDir, o.want.Spec.Name, gracePeriod(vmi)),
		Rules:        devices.Baseline(devices.BaselineOptions{KVM: r.KVM, Disks: disks}),
		BlockDevices: nodes,
		// The weight its pod's CPU request would give it in cluster mode.
		CPUMilli: cpu.MilliValue(),
	})
	if o.facts.Launcher == lifecycle.LauncherAbsent {
		vmimetrics.ObserveLauncherStart(time.Since(t0), err)
	}
	if err != nil {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonLauncherFailed, err.Error())
		return nil, ctrl.Result{}, fmt.Errorf("start launcher: %w", err)
	}
	if o.facts.Launcher == lifecycle.LauncherAbsent {
		r.trace(vmi.UID, TraceLauncherExec, t0)
	}
	if st.Exited != nil {
		r.launcherExited(vmi, st.Exited)
		return nil, ctrl.Result{}, nil
	}
	if !st.Ready {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonLauncherStarting, "waiting for the launcher to be ready")
		if r.ready == nil || r.ready.add(id, o.runDir) != nil {
			return nil, ctrl.Result{RequeueAfter: launcherStartPoll}, nil
		}
		// The socket may have been renamed before the watch existed: look once more.
		if again, err := r.Runtime.State(id); err == nil && again.Ready {
			return nil, ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		return nil, ctrl.Result{RequeueAfter: launcherStartFallback}, nil
	}
	l, err := r.connect(ctx, vmi)
	if errors.Is(err, launcher.ErrNotLauncher) {
		// Whatever answers there is not this VMI's launcher: say so, leave the VM alone
		// (its launcher still runs), and look again with the controller's back-off.
		prev := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
		if prev == nil || prev.Reason != string(vmistatus.ReasonLauncherSocketRefused) {
			r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonLauncherSocketRefused), "DialLauncher", "%v", err)
		}
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonLauncherSocketRefused, err.Error())
	}
	if err != nil {
		return nil, ctrl.Result{}, err
	}
	return l, ctrl.Result{}, nil
}

// run is the steady state: the network wired, the domain synced (started if it is not), its
// run state as spec.paused says, observed into the status, and the hotplugged interfaces and
// volumes made to match the spec.
func (r *VMIReconciler) run(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState, o *observed) (ctrl.Result, error) {
	spec := o.spec
	starting := dom.State == DomainNone
	if starting {
		r.trace(vmi.UID, TraceLauncherReady, time.Now())
	}
	t0 := time.Now()
	nics, netns, err := r.ensureNetwork(ctx, vmi, o.want, spec.NICs)
	if err != nil {
		return ctrl.Result{}, r.networkFailed(vmi, dom, err)
	}
	spec.NICs = nics
	// DHCP before the domain starts: the guest asks as soon as it boots.
	served, err := r.ensureDHCP(ctx, vmi, l, launcherDHCP{supported: dom.ServesDHCP, served: dom.DHCPServed}, false)
	if err != nil {
		return ctrl.Result{}, r.networkFailed(vmi, dom, err)
	}
	if starting {
		r.trace(vmi.UID, TraceNetwork, t0)
	}
	// spec.paused at creation starts the guest paused; later changes are pause/unpause calls,
	// not a different domain.
	spec.StartPaused = starting && vmi.Spec.Paused
	if starting || vmi.Status.SelinuxContext == "" {
		// Before QEMU opens them, at the launcher's level (selinux.go).
		if err := r.labelFiles(vmi, o.want.Storage, o.storageRes, o.found.Pid); err != nil {
			vmistatus.NotSynchronized(vmi, vmistatus.ReasonSELinuxLabelFailed, err.Error())
			return ctrl.Result{}, fmt.Errorf("label files: %w", err)
		}
	}
	if !starting {
		// A running domain keeps the vCPUs and memory it booted with: the spec's are
		// plugged (reconcileResources), and Sync compares with the domain as started.
		recordBoot(vmi, dom, spec)
		translate.PinBoot(vmi, spec)
	}
	t0 = time.Now()
	if err := r.sync(ctx, vmi.UID, l, dom, spec, netns); err != nil {
		if starting && r.startRefused(vmi.UID, err) {
			r.fail(vmi, vmistatus.ReasonStartRefused, fmt.Sprintf("QEMU refused to start the domain %d times: %v", maxStartAttempts, err))
			return ctrl.Result{}, nil
		}
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonSyncFailed, err.Error())
		return ctrl.Result{}, fmt.Errorf("sync domain: %w", err)
	}
	if starting {
		r.forgetStarts(vmi.UID)
		r.trace(vmi.UID, TraceQEMUStart, t0)
	}
	if dom.State == DomainNone {
		if dom, err = l.Domain(ctx); err != nil {
			return ctrl.Result{}, fmt.Errorf("get domain: %w", err)
		}
	}
	if dom, err = r.reconcilePause(vmi, l, dom); err != nil {
		// Say so on the VMI, not only in an Event: a hung QEMU (its QMP unanswered) leaves
		// the domain short of the spec until it answers again.
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonSyncFailed, err.Error())
		return ctrl.Result{}, err
	}
	var synced *metav1.Condition // as found: set True below
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c != nil {
		synced = c.DeepCopy()
	}
	vmistatus.Synchronized(vmi) // the one place that says so; hotplug may still say why not
	r.observeDomain(vmi, dom)
	cpuErr := r.placeVCPUs(vmi, l, dom)
	var nicErr error
	// A migration's source changes no NIC: the target starts with the layout the source
	// published, and once the guest runs there its node plugs and unplugs what the spec says.
	switch {
	case dom.State == DomainRunning && roleOf(vmi, r.NodeName) != roleSource:
		nicErr = r.reconcileNICs(ctx, vmi, l, o.want, synced, served)
	case dom.State == DomainRunning:
		r.deferNICs(ctx, vmi, l, o.want)
	}
	r.observeInterfaces(ctx, vmi, l, dom)
	var hot map[string]volumeState
	var hotErr error
	var hotAgain time.Duration
	switch {
	case dom.State == DomainRunning && roleOf(vmi, r.NodeName) == roleSource:
		hot = holdHotplug(vmi) // the layout is published (or about to be): no device changes
	case dom.State == DomainRunning:
		hot, hotAgain, hotErr = r.reconcileHotplug(ctx, vmi, l, o.want, spec)
	}
	again, resErr := r.reconcileResources(ctx, vmi, l, dom, spec)
	again = soonest(again, hotAgain)
	hotErr = errors.Join(cpuErr, nicErr, hotErr, resErr)
	r.setVolumeStatus(vmi, dom.State == DomainRunning || dom.State == DomainPaused, hot, statusClaims(vmi, o.claims, o.nodeClaims))
	setMigratable(vmi, dom, r.Network.SpanningNetworks()...) // again: judged by the volume status just written (a new volume's claim)
	if roleOf(vmi, r.NodeName) == roleSource && r.migrationRun(vmi.UID) == nil {
		copy := translate.CopiedDisks(vmi, spec.Disks, o.want.Storage.DiskVolumes)
		hotErr = errors.Join(hotErr, r.sourceBegin(ctx, vmi, l, dom, spec, copy))
	}
	if onlyUnplugPending(hotErr) {
		// The guest takes its time to release a device: look again soon, not as a failure
		// (no back-off, no Warning; the event recorder counts the repeats as one series).
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonUnplugPending), "Unplug", "%v", hotErr)
		return ctrl.Result{RequeueAfter: unplugRetry}, nil
	}
	return ctrl.Result{RequeueAfter: again}, hotErr
}

// launcherDisks are the block devices the VMI's disks open (block claims, ephemeral overlays'
// backing devices) and their paths: its launcher's device filter grants exactly these. The
// devices are looked up before the launcher starts, so a block claim that is not there (yet)
// delays the start.
func launcherDisks(p *storage.VMPlan) ([]devices.Disk, []string, error) {
	bds, err := p.BlockDevices()
	if err != nil {
		return nil, nil, err
	}
	var out []devices.Disk
	var paths []string
	for _, b := range bds {
		out = append(out, devices.Disk{Major: int64(b.Major), Minor: int64(b.Minor), ReadOnly: b.ReadOnly})
		paths = append(paths, b.Path)
	}
	return out, paths, nil
}
