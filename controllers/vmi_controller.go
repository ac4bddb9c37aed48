package controllers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/backoff"
	"github.com/vmlet/vmlet/controllers/lifecycle"
	"github.com/vmlet/vmlet/controllers/ops"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmimetrics"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/internal/faultpoint"
	"github.com/vmlet/vmlet/qemu/launcher"
	"github.com/vmlet/vmlet/storage"
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
	// VMICaches hold VMIs the manager's cache may not (cluster mode: the VMIs migrating to or
	// from this node, nodeagent.MigrationCaches); their events reconcile too. Client must read
	// them (nodeagent.UnionVMIs).
	VMICaches []cache.Cache
	Runtime   LauncherRuntime
	Dial      Dialer
	Args      LauncherArgs
	// Env returns the node facts the translation needs for a VMI's run folder.
	Env func(runDir string) translate.NodeEnv
	// KVM reports whether launchers get /dev/kvm.
	KVM bool
	// ShutdownMargin is how long past a VMI's grace period ShutdownNode waits for its launcher
	// before it kills it; 0 means 15 s.
	ShutdownMargin time.Duration
	// Storage makes each VMI's disks and kernel before its launcher starts the domain.
	Storage NodeStorage
	// APIReader reads the Secrets VMIs name (uncached); nil means Client.
	APIReader client.Reader
	// Network wires each VMI's interfaces in its pod network; nil: the node has none, and
	// VMIs with interfaces fail.
	Network *NodeNetwork
	// Trace, if set, receives the steps of each VMI's start (trace.go) as they end: what
	// `make bench` breaks the create → Ready latency down with. Called from reconciles and
	// storage operations, concurrently for different VMIs.
	Trace func(uid types.UID, step string, start, end time.Time)
	// Workers is how many VMIs are reconciled at once (one VMI never twice at a time); 0
	// means the default.
	Workers int
	// Migration is how this node reaches the others for live migration; nil: the node is
	// neither a migration source nor a target (its migrations fail with the reason).
	Migration *MigrationNet
	// SELinux is the node's SELinux and how the agent labels VMI files (selinux.go); nil:
	// nothing is labelled.
	SELinux *NodeSELinux

	gate drainGate // closed by Drain (node shutdown)

	mu    sync.Mutex
	conns map[types.UID]*launcherConn
	keys  map[types.UID]types.NamespacedName // for wake-ups by launcher id
	wrote map[types.UID]string               // the agent's last status write, by VMI (echo.go)
	// refused counts the starts QEMU refused, by VMI (start_refused.go).
	refused map[types.UID]int
	wakeup  chan event.TypedGenericEvent[*vmletv1.VirtualMachineInstance]
	ready   *readyWatch // nil: poll starting launchers
	pulls   *backoff.Backoff[pullKey]
	// hotRetries holds back hotpluggable volumes whose storage failed (storage_hotplug.go).
	hotRetries *backoff.Backoff[hotKey]
	// storageOps prepares each VMI's storage outside its reconciles (storage_ops.go).
	storageOps *ops.Tracker[types.UID, *storage.Result]
	hotplugOps *ops.Tracker[hotKey, *storage.Result]
	placeOps   *ops.Tracker[types.UID, struct{}]    // vCPU placements (cpu_place.go)
	netOps     *ops.Tracker[types.UID, struct{}]    // early network attaches (network_early.go)
	pauseOps   *ops.Tracker[types.UID, DomainState] // run-state changes (pause.go)
	// migs are the migrations this agent drives, by vmi (migration_run.go).
	migs map[types.UID]*migrationRun
}

type launcherConn struct {
	l      Launcher
	cancel context.CancelFunc
	done   chan struct{}
	synced string // the last Sync this launcher accepted for a running domain (sync.go); r.mu
	// memAsked is when the virtio-mem size was last asked of this launcher (resource_hotplug.go); r.mu
	memAsked time.Time
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
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopOps()
		return nil
	})); err != nil {
		return fmt.Errorf("add storage operations: %w", err)
	}
	here := func(vmi *vmletv1.VirtualMachineInstance) bool {
		return vmi.Status.NodeName == r.NodeName || roleOf(vmi, r.NodeName) != roleNone
	}
	onNode := predicate.NewPredicateFuncs(func(o client.Object) bool {
		vmi, ok := o.(*vmletv1.VirtualMachineInstance)
		return ok && here(vmi)
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("vmi-node").
		For(&vmletv1.VirtualMachineInstance{}, builder.WithPredicates(onNode, r.notOwnEcho())).
		WatchesRawSource(source.Channel(r.wakeup, &handler.TypedEnqueueRequestForObject[*vmletv1.VirtualMachineInstance]{}))
	for _, c := range r.VMICaches {
		b = b.WatchesRawSource(source.Kind(c, &vmletv1.VirtualMachineInstance{},
			&handler.TypedEnqueueRequestForObject[*vmletv1.VirtualMachineInstance]{},
			predicate.NewTypedPredicateFuncs(here), r.notOwnEchoTyped()))
	}
	return b.
		// Different VMIs reconcile in parallel (one VMI never does): a slow image pull or a
		// guest slow to release a disk must not hold every other VMI up. Shared state (launcher
		// connections, network attachments, the runtime) is behind mutexes.
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, workers)}).
		Complete(r)
}

// workers is how many VMIs the node agent reconciles at once by default. Reconciles wait on
// nothing long (storage runs as tracked operations, launcher calls have deadlines); what
// remains is the launcher's Sync (QEMU's start) and hotplug calls. Chosen by measurement
// (BENCHMARKS.md, BenchmarkCreateToRunning with VMLET_BENCH_WORKERS).
const workers = 4 // of 2, 4 and 8 on 2 cores, 4 started 20 VMIs fastest (BENCHMARKS.md)

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
func (r *VMIReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	if !r.gate.enter() {
		return ctrl.Result{}, nil // drained: the node is shutting down
	}
	defer r.gate.exit()
	vmi := &vmletv1.VirtualMachineInstance{}
	if err := r.Client.Get(ctx, req.NamespacedName, vmi); apierrors.IsNotFound(err) {
		return ctrl.Result{}, r.gone(ctx, req.NamespacedName)
	} else if err != nil {
		return ctrl.Result{}, err
	}
	if vmi.Status.NodeName != r.NodeName && roleOf(vmi, r.NodeName) == roleNone {
		return ctrl.Result{}, nil
	}
	conflict := false
	defer func() { vmimetrics.ObserveReconcile(reconcileResult(res, err, conflict), vmi) }()
	r.mu.Lock()
	_, seen := r.keys[vmi.UID]
	r.keys[vmi.UID] = req.NamespacedName
	r.mu.Unlock()
	if !seen {
		r.trace(vmi.UID, TraceFirstReconcile, time.Now())
	}
	before, roleBefore := vmi.Status.DeepCopy(), roleOf(vmi, r.NodeName)
	res, err = r.reconcile(ctx, vmi)
	if apierrors.IsConflict(err) {
		// A write raced another writer of the VMI (e.g. the finalizer patch, guarded by the
		// resourceVersion): not a failure to report; read everything again. The status in hand
		// is of the stale object, so it is not written.
		conflict = true
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	if err != nil {
		r.Recorder.Eventf(vmi, nil, "Warning", string(vmistatus.ReasonSyncFailed), "Reconcile", "%v", err)
	}
	if !vmi.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(vmi, Finalizer) {
		return res, err // finalizer removed: the object may be gone
	}
	vmistatus.KeepTransitionTimes(before, vmi)
	if !equality.Semantic.DeepEqual(before, &vmi.Status) {
		t0 := time.Now()
		uerr := r.Client.Status().Update(ctx, vmi)
		if uerr == nil {
			r.wroteStatus(vmi, before.Phase != vmi.Status.Phase || roleOf(vmi, r.NodeName) != roleBefore)
		}
		if uerr == nil && before.Phase != vmletv1.Running && vmi.Status.Phase == vmletv1.Running {
			r.trace(vmi.UID, TraceStatusRunning, t0)
		}
		if uerr == nil && !pausedCondition(before) && pausedCondition(&vmi.Status) {
			r.trace(vmi.UID, TraceStatusPaused, t0)
		}
		if uerr == nil && before.Phase != vmi.Status.Phase {
			vmimetrics.ObservePhaseTransition(before.Phase, vmi)
		}
		switch {
		case apierrors.IsConflict(uerr):
			// Someone wrote the VMI since we read it: read everything again.
			conflict = true
			return ctrl.Result{RequeueAfter: time.Millisecond}, err
		case uerr != nil && !apierrors.IsNotFound(uerr):
			return ctrl.Result{}, errors.Join(err, fmt.Errorf("update status: %w", uerr))
		}
	}
	return res, err
}

func (r *VMIReconciler) reconcile(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) (ctrl.Result, error) {
	role := roleOf(vmi, r.NodeName)
	if r.staleRun(ctx, vmi, r.migrationRun(vmi.UID)) {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil // the cache lags behind the run
	}
	if m := r.migrationRun(vmi.UID); m != nil && role == roleNone {
		if v := m.snapshot(); v.ended {
			if ms := vmi.Status.MigrationState; m.source && v.err != nil && ms != nil && ms.MigrationUID == m.migration && ms.Failed {
				r.sourceFailed(vmi, sourceFailure(v.err, v.why, ms.AbortRequested)) // the target said so first; add why
			}
			r.forgetRun(vmi.UID) // its outcome is in the status
		}
	}
	if role == roleNone && postcopyLost(vmi, r.NodeName) {
		// The migration failed after it switched to post-copy (the target said so, or this
		// agent learns it after a restart): the guest cannot run here again.
		return ctrl.Result{}, r.postcopyFailed(ctx, vmi, "the target failed during post-copy")
	}
	switch role {
	case roleTarget:
		return r.targetStep(ctx, vmi)
	case roleTargetFailed:
		return ctrl.Result{}, r.leaveNode(ctx, vmi)
	case roleSourceDone:
		return r.sourceDone(ctx, vmi)
	case roleSource:
		if vmi.DeletionTimestamp.IsZero() && !vmistatus.IsFinal(vmi.Status.Phase) {
			if res, handled, err := r.sourceStep(ctx, vmi); handled {
				return res, err
			}
		}
	}
	if !vmi.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, vmi)
	}
	if vmistatus.IsFinal(vmi.Status.Phase) {
		return ctrl.Result{}, r.teardown(ctx, vmi)
	}
	if role == roleNone && evicted(vmi) {
		return r.evict(vmi)
	}
	if err := patchFinalizer(ctx, r.Client, vmi, true); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil // deleted before it was ever started here
		}
		return ctrl.Result{}, err
	}
	// Observe, decide, act.
	o := r.observe(ctx, vmi)
	switch step := lifecycle.Next(o.facts); step {
	case lifecycle.EndFromExit:
		r.launcherExited(vmi, o.found.Exited)
		return ctrl.Result{}, nil
	case lifecycle.WaitForSecrets:
		return r.refsFailed(vmi, o.refsErr)
	case lifecycle.ReportUntranslatable:
		// Started from an earlier translation (a Secret or the node's storage changed
		// since): the domain keeps running; say why the spec no longer translates, retry.
		r.degraded(vmi, specReason(o.translateErr), "Translate", o.translateErr)
		return ctrl.Result{}, o.translateErr
	case lifecycle.FailUntranslatable:
		r.fail(vmi, specReason(o.translateErr), o.translateErr.Error())
		return ctrl.Result{}, nil
	case lifecycle.WaitForNetworks:
		return r.waitForNetworks(vmi, o.want), nil
	case lifecycle.WaitForStorage:
		// No launcher before its images are there (as no pod starts before its images):
		// the operation's end wakes the VMI.
		r.storagePreparing(vmi, o.want)
		return ctrl.Result{}, nil
	case lifecycle.BackOffStorage:
		return r.waitForImage(vmi, o.backOff()), nil
	case lifecycle.FailStorage:
		r.fail(vmi, vmistatus.Reason(storage.Reason(o.storageErr)), o.storageErr.Error())
		return ctrl.Result{}, nil
	case lifecycle.EnsureLauncher:
	default:
		return ctrl.Result{}, fmt.Errorf("unknown step %s", step)
	}
	l, res, err := r.ensureLauncher(ctx, vmi, o)
	if l == nil {
		return res, err
	}
	dom, err := l.Domain(ctx)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("get domain: %w", err)
	}
	switch step := lifecycle.NextForDomain(o.facts.Storage, dom.State != DomainNone); step {
	case lifecycle.Run:
	case lifecycle.WaitForStorageToStart:
		r.storagePreparing(vmi, o.want)
		return ctrl.Result{}, nil
	case lifecycle.ObserveWhileStoragePrepares:
		r.observeDomain(vmi, dom)
		return ctrl.Result{}, nil
	case lifecycle.BackOffBeforeStart:
		return r.waitForImage(vmi, o.backOff()), nil
	case lifecycle.FailBeforeStart:
		r.fail(vmi, vmistatus.Reason(storage.Reason(o.storageErr)), o.storageErr.Error())
		return ctrl.Result{}, nil
	case lifecycle.ObserveBackingOff:
		r.observeDomain(vmi, dom)
		return r.waitForImage(vmi, o.backOff()), nil
	case lifecycle.ReportStorage:
		return r.storageDegraded(vmi, dom, o.storageErr)
	default:
		return ctrl.Result{}, fmt.Errorf("unknown step %s", step)
	}
	return r.run(ctx, vmi, l, dom, o)
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
	l, err := r.Dial(dctx, r.Runtime.Socket(string(vmi.UID)), r.peerCheck(vmi.UID))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("dial launcher: %w", err)
	}
	if m, ok := r.Runtime.(PIDMapper); ok {
		if pm, ok := l.(pidMapped); ok {
			id := string(vmi.UID)
			pm.mapPIDs(func(pid int) (int, error) { return m.HostPID(id, pid) })
		}
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
	delete(r.refused, vmi.UID)
	r.mu.Unlock()
	if err := patchFinalizer(ctx, r.Client, vmi, false); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// teardown removes everything the VMI's launcher left on the node. A launcher still running is
// killed with its cgroup.
func (r *VMIReconciler) teardown(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	r.forgetRun(vmi.UID)
	r.placeTracker().Forget(vmi.UID) // no cgroup write races the removal
	r.pauseTracker().Forget(vmi.UID)
	r.disconnect(vmi.UID)
	if err := r.Runtime.Remove(ctx, string(vmi.UID)); err != nil {
		return fmt.Errorf("remove launcher: %w", err)
	}
	faultpoint.Hit("teardown.launcher-removed", "") // the fault matrix's kill mid-teardown
	r.netTracker().Forget(vmi.UID)                  // an early attach ends before the network is released
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
