package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// LauncherAnswerTimeout is how long a launcher has to answer the readiness check's GetDomain.
const LauncherAnswerTimeout = time.Second

// ErrLaunchersNotAnswering is the readiness failure of an agent whose launchers do not answer.
var ErrLaunchersNotAnswering = errors.New("launchers not answering")

// LaunchersAnswer asks the launcher of every Running VMI on this node for its domain
// (GetDomain, a snapshot the launcher keeps: no QMP round trip) within LauncherAnswerTimeout,
// over the reconciler's connection or, where it has none (not reconciled yet since this agent
// started), a connection of its own. The error names each VMI whose launcher did not answer:
// the agent cannot manage it (the readiness check of /readyz).
func (r *VMIReconciler) LaunchersAnswer(ctx context.Context) error {
	var l vmletv1.VirtualMachineInstanceList
	if err := r.Client.List(ctx, &l); err != nil {
		return fmt.Errorf("list vmis: %w", err)
	}
	var (
		mu     sync.Mutex
		failed []string
		wg     sync.WaitGroup
	)
	for i := range l.Items {
		v := &l.Items[i]
		if v.Status.NodeName != r.NodeName || v.Status.Phase != vmletv1.Running || !v.DeletionTimestamp.IsZero() {
			continue
		}
		wg.Add(1)
		go func(key string, uid types.UID) {
			defer wg.Done()
			if err := r.launcherAnswers(ctx, uid); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s (%v)", key, err))
				mu.Unlock()
			}
		}(v.Namespace+"/"+v.Name, v.UID)
	}
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	sort.Strings(failed)
	return fmt.Errorf("%w within %s: %s", ErrLaunchersNotAnswering, LauncherAnswerTimeout, strings.Join(failed, ", "))
}

func (r *VMIReconciler) launcherAnswers(ctx context.Context, uid types.UID) error {
	ctx, cancel := context.WithTimeout(ctx, LauncherAnswerTimeout)
	defer cancel()
	r.mu.Lock()
	c := r.conns[uid]
	r.mu.Unlock()
	l := Launcher(nil)
	if c != nil {
		select {
		case <-c.done: // its event stream broke: the reconciler dials again; so do we
		default:
			l = c.l
		}
	}
	if l == nil {
		d, err := r.Dial(ctx, r.Runtime.Socket(string(uid)), r.peerCheck(uid))
		if err != nil {
			return fmt.Errorf("dial: %w", err)
		}
		defer func() { _ = d.Close() }()
		l = d
	}
	if _, err := l.Domain(ctx); err != nil {
		return fmt.Errorf("get domain: %w", err)
	}
	return nil
}
