package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/process"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// defaultShutdownMargin is how long past a VMI's grace period ShutdownNode waits for its
// launcher, which stops QEMU by force when the grace period ends (VMIReconciler.ShutdownMargin).
const defaultShutdownMargin = 15 * time.Second

func (r *VMIReconciler) shutdownMargin() time.Duration {
	if r.ShutdownMargin > 0 {
		return r.ShutdownMargin
	}
	return defaultShutdownMargin
}

// teardownTimeout bounds removing a VMI's node-local state and recording its end once its
// launcher stopped (or its wait ran out).
const teardownTimeout = 30 * time.Second

// drainGate lets reconciles in until Drain closes it; Drain waits for those in flight.
type drainGate struct {
	mu     sync.RWMutex
	closed bool
}

// enter reports whether a reconcile may run; if so the caller must call exit.
func (g *drainGate) enter() bool {
	g.mu.RLock()
	if g.closed {
		g.mu.RUnlock()
		return false
	}
	return true
}

func (g *drainGate) exit() { g.mu.RUnlock() }

// Drain stops the reconciler: reconciles in flight finish, later ones do nothing. What the
// launchers do from then on (e.g. exit because the node shuts down) is not written to any VMI.
func (r *VMIReconciler) Drain() {
	r.gate.mu.Lock()
	r.gate.closed = true
	r.gate.mu.Unlock()
}

// ShutdownNode is the node's graceful shutdown, like the kubelet's graceful node shutdown: it
// drains the reconciler (so a guest powering off for the shutdown is not taken for the guest
// powering off by itself), asks every launcher to shut its guest down (SIGTERM: ACPI powerdown
// within the VMI's grace period, then QEMU is stopped by force), all in parallel, removes each
// VMI's node-local state, and ends every VMI of this node that was not final as Failed with
// reason NodeShutdown (Ready=False, a Warning Event). A VMI being deleted loses its finalizer
// instead. Launchers that belong to no VMI are stopped and removed too. The manager must still
// run (its event recorder); call it before stopping it.
func (r *VMIReconciler) ShutdownNode(ctx context.Context) error {
	r.Drain()
	var l vmletv1.VirtualMachineInstanceList
	if err := r.reader().List(ctx, &l); err != nil {
		return fmt.Errorf("list VMIs: %w", err)
	}
	ids, err := r.Runtime.List()
	if err != nil {
		return fmt.Errorf("list launchers: %w", err)
	}
	orphans := map[string]bool{}
	for _, id := range ids {
		orphans[id] = true
	}
	errs := make(chan error, len(l.Items)+len(ids))
	var wg sync.WaitGroup
	for i := range l.Items {
		vmi := &l.Items[i]
		if vmi.Status.NodeName != r.NodeName {
			continue
		}
		delete(orphans, string(vmi.UID))
		wg.Go(func() { errs <- r.shutdownVMI(ctx, vmi) })
	}
	for id := range orphans {
		wg.Go(func() {
			_, err := r.stopLauncher(ctx, id, 30*time.Second+r.shutdownMargin())
			if errors.Is(err, errLauncherStuck) {
				err = nil // Remove kills it with its cgroup
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
			defer cancel()
			errs <- errors.Join(err, r.Runtime.Remove(rctx, id))
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (r *VMIReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// shutdownVMI shuts one VMI's guest down, removes its node-local state and records the end.
func (r *VMIReconciler) shutdownVMI(ctx context.Context, vmi *vmletv1.VirtualMachineInstance) error {
	key := client.ObjectKeyFromObject(vmi)
	// A launcher that outlives its deadline (on a loaded node, among many stopping at once) is
	// killed with its cgroup by teardown: the VMI's message says so, it is no failure of the
	// shutdown.
	wait := gracePeriod(vmi) + r.shutdownMargin()
	ex, stopErr := r.stopLauncher(ctx, string(vmi.UID), wait)
	stuck := errors.Is(stopErr, errLauncherStuck)
	switch {
	case stuck:
		stopErr = nil
	case stopErr != nil:
		stopErr = fmt.Errorf("shut %s down: %w", key, stopErr)
	}
	// Even when the shutdown's deadline passed: kill what is left and write down how it ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	if err := r.teardown(ctx, vmi); err != nil {
		return errors.Join(stopErr, fmt.Errorf("tear %s down: %w", key, err))
	}
	msg := shutdownMsg(ex, gracePeriod(vmi))
	if stuck {
		msg = shutdownStuckMsg(wait)
	}
	return errors.Join(stopErr, r.recordShutdown(ctx, vmi, msg))
}

// shutdownStuckMsg is the VMI's message after a node shutdown whose wait for the launcher ran
// out.
func shutdownStuckMsg(wait time.Duration) string {
	return fmt.Sprintf("the node shut down (vmlet stopped) and its launcher, asked to stop, had not exited after %s: it was killed with QEMU; a VMI is one run of a VM: create it again to run the VM again", wait)
}

// shutdownMsg is the VMI's message after a node shutdown: how its guest ended, and what to do.
func shutdownMsg(ex *process.Exit, grace time.Duration) string {
	how := "the node shut down (vmlet stopped)"
	switch {
	case ex == nil:
		how += "; the VMI had no running launcher"
	case ex.Known && ex.Code == launcher.ExitOK:
		how += " and the guest powered off"
	case ex.Known && ex.Code == launcher.ExitForced:
		how += fmt.Sprintf(" and the guest, asked to power off, did not within its grace period (%s): QEMU was stopped by force", grace)
	default:
		how += " and its launcher was stopped"
	}
	return how + "; a VMI is one run of a VM: create it again to run the VM again"
}

// recordShutdown ends the VMI as Failed/NodeShutdown, or removes its finalizer if it is being
// deleted.
func (r *VMIReconciler) recordShutdown(ctx context.Context, vmi *vmletv1.VirtualMachineInstance, msg string) error {
	key := client.ObjectKeyFromObject(vmi)
	if !vmi.DeletionTimestamp.IsZero() {
		if !controllerutil.ContainsFinalizer(vmi, Finalizer) {
			return nil
		}
		patch := client.MergeFrom(vmi.DeepCopy())
		controllerutil.RemoveFinalizer(vmi, Finalizer)
		if err := r.Client.Patch(ctx, vmi, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove finalizer of %s: %w", key, err)
		}
		return nil
	}
	for {
		if vmistatus.IsFinal(vmi.Status.Phase) {
			return nil
		}
		r.fail(vmi, vmistatus.ReasonNodeShutdown, msg)
		err := r.Client.Status().Update(ctx, vmi)
		if !apierrors.IsConflict(err) {
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("update status of %s: %w", key, err)
			}
			return nil
		}
		// Written since it was listed: read it again (the Event is not sent twice: fail
		// sends it only when the phase changes, and the fresh copy is not Failed yet).
		if err := r.reader().Get(ctx, key, vmi); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
}

// errLauncherStuck says a launcher asked to stop had not exited when its wait ran out.
var errLauncherStuck = errors.New("did not exit")

// stopLauncher sends the launcher SIGTERM and waits until it exited, at most d (the launcher
// stops QEMU by force at the end of the grace period), and returns how it exited
// (errLauncherStuck once d passed). No launcher, or one that had exited already: nil.
func (r *VMIReconciler) stopLauncher(ctx context.Context, id string, d time.Duration) (*process.Exit, error) {
	st, err := r.Runtime.State(id)
	if errors.Is(err, process.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("launcher state: %w", err)
	}
	if st.Exited != nil {
		return nil, nil
	}
	if err := r.Runtime.Stop(id); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := r.Runtime.State(id)
		if err != nil {
			return nil, nil
		}
		if st.Exited != nil {
			return st.Exited, nil
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("launcher %s: %w after %s", id, errLauncherStuck, d)
			}
			return nil, fmt.Errorf("launcher %s did not exit: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}
