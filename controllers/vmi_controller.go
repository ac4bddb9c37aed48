package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/controllers/launcherpod"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// Finalizer keeps a VMI until the node agent has torn down its node-local state.
const Finalizer = "vmlet.dev/node-cleanup"

// launcherStartPoll is how often a reconcile looks again at a launcher that is starting (its
// socket is not ready yet). The launcher has no way to tell the agent before it is ready.
const launcherStartPoll = 100 * time.Millisecond

// launcherDialTimeout bounds connecting to a launcher whose socket is ready.
const launcherDialTimeout = 10 * time.Second

// launcherStartFallback is how often a reconcile looks at a starting launcher whose run folder
// is watched (readyWatch wakes it on the rename): only in case an event is missed.
const launcherStartFallback = 2 * time.Second

// VMIReconciler is the node agent's VMI reconciler: it runs each VMI assigned to its node through
// a launcher and writes the observed domain state back into the VMI's status.
type VMIReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	NodeName string
	Runtime  LauncherRuntime
	Dial     Dialer
	Args     LauncherArgs
	// Env returns the node facts the translation needs for a VMI's run folder.
	Env func(runDir string) translate.NodeEnv
	// KVM reports whether launchers get /dev/kvm.
	KVM bool
	// Storage makes each VMI's disks and kernel before its launcher starts the domain.
	Storage NodeStorage
	// APIReader reads the Secrets VMIs name (uncached); nil means Client.
	APIReader client.Reader
	// Network wires each VMI's interfaces in its pod network; nil: the node has none, and
	// VMIs with interfaces fail.
	Network *NodeNetwork

	gate drainGate // closed by Drain (node shutdown)

	mu     sync.Mutex
	conns  map[types.UID]*launcherConn
	keys   map[types.UID]types.NamespacedName // for wake-ups by launcher id
	wakeup chan event.TypedGenericEvent[*vmletv1.VirtualMachineInstance]
	ready  *readyWatch // nil: poll starting launchers
	pulls  *backoff.Backoff[pullKey]
}

type launcherConn struct {
	l      Launcher
	cancel context.CancelFunc
	done   chan struct{}
}

// SetupWithManager registers the reconciler: it watches VMIs on this node and launcher events.
func (r *VMIReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.conns = map[types.UID]*launcherConn{}
	r.keys = map[types.UID]types.NamespacedName{}
	r.wakeup = make(chan event.TypedGenericEvent[*vmletv1.VirtualMachineInstance], 1024)
	if w, err := newReadyWatch(r.WakeByID); err == nil {
		if err := mgr.Add(w); err != nil {
			return fmt.Errorf("add launcher socket watch: %w", err)
		}
		r.ready = w
	} else {
		mgr.GetLogger().Info("polling starting launchers", "reason", err)
	}
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		vmi, ok := o.(*vmletv1.VirtualMachineInstance)
		return ok && vmi.Status.NodeName == r.NodeName
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("vmi-node").
		For(&vmletv1.VirtualMachineInstance{}, builder.WithPredicates(onNode)).
		WatchesRawSource(source.Channel(r.wakeup, &handler.TypedEnqueueRequestForObject[*vmletv1.VirtualMachineInstance]{})).
		// Different VMIs reconcile in parallel (one VMI never does): a slow image pull or a
		// guest slow to release a disk must not hold every other VMI up. Shared state (launcher
		// connections, network attachments, the runtime) is behind mutexes.
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// workers is how many VMIs the node agent reconciles at once.
const workers = 4

// Wake enqueues a VMI; launcher events and launcher exits call it.
func (r *VMIReconciler) Wake(namespace, name string) {
	vmi := &vmletv1.VirtualMachineInstance{}
	vmi.Namespace, vmi.Name = namespace, name
	select {
	case r.wakeup <- event.TypedGenericEvent[*vmletv1.VirtualMachineInstance]{Object: vmi}:
	default: // a full queue already holds wake-ups; the next reconcile reads all state anyway
	}
}

// WakeByID enqueues the VMI whose launcher id (its UID) is id, if this agent has seen it.
func (r *VMIReconciler) WakeByID(id string) {
	r.mu.Lock()
	k, ok := r.keys[types.UID(id)]
	r.mu.Unlock()
	if ok {
		r.Wake(k.Namespace, k.Name)
	}
}

// Reconcile is level-based: it reads the VMI and the launcher's state, acts, and writes the
// status once if it changed.
func (r *VMIReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if !r.gate.enter() {
		return ctrl.Result{}, nil // drained: the node is shutting down
	}
	defer r.gate.exit()
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, vmi); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vmi.Status.NodeName != r.NodeName {
		return ctrl.Result{}, nil
	}
	r.mu.Lock()
	r.keys[vmi.UID] = req.NamespacedName
	r.mu.Unlock()
	before := vmi.Status.DeepCopy()
	res, err := r.reconcile(ctx, vmi)
	if apierrors.IsConflict(err) {
		// A write raced another writer of the VMI (e.g. the finalizer patch, guarded by the
		// resourceVersion): not a failure to report; read everything again. The status in hand
		// is of the stale object, so it is not written.
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if err != nil {
		r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonSyncFailed), "Reconcile", "%v", err)
	}
	if !vmi.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(vmi, Finalizer) {
		return res, err // finalizer removed: the object may be gone
	}
	if !equality.Semantic.DeepEqual(before, &vmi.Status) {
		uerr := r.Client.Status().Update(ctx, vmi)
		switch {
		case apierrors.IsConflict(uerr):
			// Someone wrote the VMI since we read it: read everything again.
			return ctrl.Result{RequeueAfter: time.Millisecond}, err
		case uerr != nil && !apierrors.IsNotFound(uerr):
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("update status: %w", uerr))
		}
	}
	return res, err
}

func (r *VMIReconciler) reconcile(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	id := string(vmi.UID)
	if !vmi.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, vmi)
	}
	if vmistatus.IsFinal(vmi.Status.Phase) {
		return ctrl.Result{}, r.teardown(ctx, vmi)
	}
	if err := patchFinalizer(ctx, r.Client, vmi, true); err != nil {
		return ctrl.Result{}, err
	}
	// Read once: one VMI is never reconciled twice at a time, so nothing else starts its
	// launcher before Ensure below. A launcher that exited ends the VMI whatever its spec and
	// volumes look like now.
	found, stateErr := r.Runtime.State(id)
	if stateErr == nil && found.Exited != nil {
		r.launcherExited(vmi, found.Exited)
		return ctrl.Result{}, nil
	}
	notStarted := errors.Is(stateErr, process.ErrNotFound)
	runDir := r.Runtime.Dir(id)
	env := r.Env(runDir)
	env.VolumeDir = r.volumeDir(vmi.UID)
	refs, err := r.readRefs(ctx, vmi)
	if err != nil {
		return r.refsFailed(vmi, err)
	}
	want, err := translate.Translate(vmi, env, refs)
	if err != nil {
		if stateErr == nil {
			// Started from an earlier translation (a Secret or the node's storage changed
			// since): the domain keeps running; say why the spec no longer translates, retry.
			r.degraded(vmi, specReason(err), "Translate", err)
			return ctrl.Result{}, err
		}
		r.fail(vmi, specReason(err), err.Error())
		return ctrl.Result{}, nil
	}
	if notStarted {
		if res, ok := r.waitForNetworks(vmi, want); !ok {
			return res, nil
		}
	}
	// Storage before the domain: pull images, make overlays, empty disks and the cloud-init
	// ISO (idempotent, so on every reconcile). Failing before the launcher runs fails the VMI,
	// unless an image pull is backing off.
	spec, storageErr := r.applyStorage(ctx, vmi, want)
	if storageErr != nil && notStarted {
		return r.storageFailed(vmi, storageErr)
	}
	cpu := launcherpod.CPURequest(vmi)
	st, err := r.Runtime.Ensure(ctx, process.Spec{
		ID:    id,
		Name:  vmi.Namespace + "/" + vmi.Name,
		Args:  r.Args(runDir, want.Spec.Name, gracePeriod(vmi)), // spec is nil when storage failed
		Rules: devices.Baseline(devices.BaselineOptions{KVM: r.KVM}),
		// The weight its pod's CPU request would give it in cluster mode.
		CPUMilli: cpu.MilliValue(),
	})
	if err != nil {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonLauncherFailed, err.Error())
		return ctrl.Result{}, fmt.Errorf("start launcher: %w", err)
	}
	if st.Exited != nil {
		r.launcherExited(vmi, st.Exited)
		return ctrl.Result{}, nil
	}
	if !st.Ready {
		vmistatus.SetPhase(vmi, vmletv1.Scheduled)
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonLauncherStarting, "waiting for the launcher to be ready")
		if r.ready == nil || r.ready.add(id, runDir) != nil {
			return ctrl.Result{RequeueAfter: launcherStartPoll}, nil
		}
		// The socket may have been renamed before the watch existed: look once more.
		if again, err := r.Runtime.State(id); err == nil && again.Ready {
			return ctrl.Result{RequeueAfter: time.Millisecond}, nil
		}
		return ctrl.Result{RequeueAfter: launcherStartFallback}, nil
	}
	l, err := r.connect(ctx, vmi)
	if err != nil {
		return ctrl.Result{}, err
	}
	dom, err := l.Domain(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get domain: %w", err)
	}
	if storageErr != nil {
		if dom.State == DomainNone {
			return r.storageFailed(vmi, storageErr)
		}
		// The domain runs with the disks it opened: report, keep observing, retry.
		return r.storageDegraded(vmi, dom, storageErr)
	}
	nics, netns, err := r.ensureNetwork(ctx, vmi, want, spec.NICs)
	if err != nil {
		return ctrl.Result{}, r.networkFailed(vmi, dom, err)
	}
	spec.NICs = nics
	// spec.paused at creation starts the guest paused; later changes are pause/unpause calls,
	// not a different domain.
	spec.StartPaused = dom.State == DomainNone && vmi.Spec.Paused
	if err := l.Sync(ctx, spec, netns); err != nil {
		vmistatus.NotSynchronized(vmi, vmistatus.ReasonSyncFailed, err.Error())
		return ctrl.Result{}, fmt.Errorf("sync domain: %w", err)
	}
	if dom.State == DomainNone {
		if dom, err = l.Domain(ctx); err != nil {
			return ctrl.Result{}, fmt.Errorf("get domain: %w", err)
		}
	}
	if dom, err = r.reconcilePause(ctx, vmi, l, dom); err != nil {
		return ctrl.Result{}, err
	}
	var synced *metav1.Condition // as found: observe overwrites it
	if c := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); c != nil {
		synced = c.DeepCopy()
	}
	r.observe(vmi, dom)
	cpuErr := r.placeVCPUs(ctx, vmi, l, dom)
	var nicErr error
	if dom.State == DomainRunning {
		nicErr = r.reconcileNICs(ctx, vmi, l, want, synced)
	}
	r.observeInterfaces(ctx, vmi, l, dom)
	var hot map[string]volumeState
	var hotErr error
	if dom.State == DomainRunning {
		hot, hotErr = r.reconcileHotplug(ctx, vmi, l, want, spec)
	}
	hotErr = errors.Join(cpuErr, nicErr, hotErr)
	r.setVolumeStatus(vmi, dom.State == DomainRunning || dom.State == DomainPaused, hot)
	return ctrl.Result{}, hotErr
}

// placeVCPUs moves a running domain's QEMU into its VM's CPU group and its vCPU threads into
// their low-weight group once, when
// the runtime keeps them there (VCPUPlacer) and they are not there yet: one read of the group
// per reconcile, one launcher call per QEMU start (and per agent restart that finds the group
// empty). A failure leaves the guest running at its VM's weight and is retried.
func (r *VMIReconciler) placeVCPUs(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) error {
	p, ok := r.Runtime.(VCPUPlacer)
	if !ok || (dom.State != DomainRunning && dom.State != DomainPaused) {
		return nil
	}
	id := string(vmi.UID)
	if placed, err := p.VCPUsPlaced(id); err != nil || placed {
		return err
	}
	tids, err := l.VCPUThreads(ctx)
	if err != nil {
		return fmt.Errorf("place vcpu threads: %w", err)
	}
	return p.PlaceVCPUs(id, dom.Pid, tids)
}

// reconcilePause makes the domain's run state match spec.paused.
func (r *VMIReconciler) reconcilePause(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, l Launcher, dom DomainState) (DomainState, error) {
	switch {
	case vmi.Spec.Paused && dom.State == DomainRunning:
		d, err := l.Pause(ctx)
		if err != nil {
			return dom, fmt.Errorf("pause: %w", err)
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonPaused), "Pause", "guest vCPUs stopped (spec.paused)")
		return d, nil
	case !vmi.Spec.Paused && dom.State == DomainPaused:
		d, err := l.Unpause(ctx)
		if err != nil {
			return dom, fmt.Errorf("unpause: %w", err)
		}
		r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonResumed), "Unpause", "guest vCPUs resumed (spec.paused=false)")
		return d, nil
	}
	return dom, nil
}

// connect returns the open connection to the VMI's launcher, dialing and starting its event
// watch on first use.
func (r *VMIReconciler) connect(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (Launcher, error) {
	r.mu.Lock()
	c := r.conns[vmi.UID]
	r.mu.Unlock()
	if c != nil {
		select {
		case <-c.done: // the event stream broke: reconnect
			r.disconnect(vmi.UID)
		default:
			return c.l, nil
		}
	}
	// Bounded: the dial waits for the launcher to be ready, and a launcher that died after the
	// reconcile looked at it would otherwise hold this worker for good (its exit is seen on the
	// retry).
	dctx, cancel := context.WithTimeout(ctx, launcherDialTimeout)
	l, err := r.Dial(dctx, r.Runtime.Socket(string(vmi.UID)))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dial launcher: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	c = &launcherConn{l: l, cancel: cancel, done: make(chan struct{})}
	ns, name := vmi.Namespace, vmi.Name
	go func() {
		defer close(c.done)
		err := l.Watch(wctx, func() { r.Wake(ns, name) })
		if wctx.Err() == nil {
			log.FromContext(wctx).V(1).Info("launcher event stream ended", "vmi", ns+"/"+name, "err", err)
			r.Wake(ns, name)
		}
	}()
	r.mu.Lock()
	r.conns[vmi.UID] = c
	r.mu.Unlock()
	return l, nil
}

func (r *VMIReconciler) disconnect(uid types.UID) {
	r.mu.Lock()
	c := r.conns[uid]
	delete(r.conns, uid)
	r.mu.Unlock()
	if c != nil {
		c.cancel()
		_ = c.l.Close()
	}
}

// finalize stops the launcher (graceful guest shutdown within the grace period), removes its
// node-local state and then the finalizer.
func (r *VMIReconciler) finalize(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(vmi, Finalizer) {
		return ctrl.Result{}, nil
	}
	id := string(vmi.UID)
	st, err := r.Runtime.State(id)
	switch {
	case errors.Is(err, process.ErrNotFound):
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("launcher state: %w", err)
	case st.Exited == nil:
		// SIGTERM: the launcher powers the guest down within its grace period, then quits or
		// kills QEMU. Its exit wakes this reconciler again.
		if err := r.Runtime.Stop(id); err != nil {
			return ctrl.Result{}, err
		}
		vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonShuttingDown, "deleting: guest shutdown requested")
		return ctrl.Result{RequeueAfter: gracePeriod(vmi) + 5*time.Second}, nil
	default:
		// The launcher stopped for the deletion: say how the guest went (a guest that ignored
		// ACPI was stopped by force at the end of its grace period: a Warning event, which
		// outlives the VMI). Once: a final phase is not recorded again. With a grace period of
		// 0 the immediate stop is what was asked for: said, but not as a warning.
		switch {
		case vmistatus.IsFinal(vmi.Status.Phase):
		case gracePeriod(vmi) == 0 && st.Exited.Known && st.Exited.Code == launcher.ExitForced:
			r.Recorder.Eventf(vmi, nil, "Normal", string(vmistatus.ReasonStopped), "Delete", "terminationGracePeriodSeconds is 0: QEMU was stopped at once, without asking the guest")
			vmistatus.SetPhase(vmi, vmletv1.Failed)
			vmi.Status.Reason = string(vmistatus.ReasonStopped)
		default:
			r.launcherExited(vmi, st.Exited)
		}
	}
	if err := r.teardown(ctx, vmi); err != nil {
		return ctrl.Result{}, err
	}
	r.mu.Lock()
	delete(r.keys, vmi.UID)
	r.mu.Unlock()
	if err := patchFinalizer(ctx, r.Client, vmi, false); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// teardown removes everything the VMI's launcher left on the node. A launcher still running is
// killed with its cgroup.
func (r *VMIReconciler) teardown(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	r.disconnect(vmi.UID)
	if err := r.Runtime.Remove(ctx, string(vmi.UID)); err != nil {
		return fmt.Errorf("remove launcher: %w", err)
	}
	if err := r.cleanupNetwork(vmi); err != nil {
		return err
	}
	return r.cleanupStorage(vmi)
}

func gracePeriod(vmi *vmletv1.VirtualMachineInstance) time.Duration {
	if g := vmi.Spec.TerminationGracePeriodSeconds; g != nil {
		return time.Duration(*g) * time.Second
	}
	return 30 * time.Second
}
