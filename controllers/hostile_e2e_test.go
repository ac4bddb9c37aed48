package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/figure"
	"github.com/vmlet/vmlet/test/hostile"
	"github.com/vmlet/vmlet/test/prereq"
)

// hostileParallel is how many admitted cases run at a time (TCG guests on 2 cores).
const hostileParallel = 3

// hostileTally counts what the cases did, for the summary line.
type hostileTally struct {
	mu                           sync.Mutex
	cases, rejected, failed, ran int
	crashes, stuck, leaks, wrong int
}

func (h *hostileTally) add(f func(h *hostileTally)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// TestHostileInputs runs every case of test/hostile/cases against the real API server and a
// real agent (QEMU included): each is refused by the API with a message naming the field, or
// fails with its reason, or runs, as its header says, within its deadline; then it is deleted
// and leaves nothing (run and volume folders, cgroup, processes, pod network). At the end the
// agent still reconciles: a plain VMI runs. One summary line gives the figures.
func TestHostileInputs(t *testing.T) {
	prereq.Root(t)
	prereq.QEMU(t)
	root := hostileDiskRoot(t)
	cases, err := hostile.Load(filepath.Join(apienv.RepoRoot(), "test/hostile/cases"),
		hostile.Vars{GuestImage: guestImage, HostDiskRoot: root})
	if err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, agentOptions{HostDiskRoot: root, ImageSources: hostileSources(t, cases)})
	defer a.stop(t)
	start := time.Now()
	tally := &hostileTally{cases: len(cases)}
	var admitted []*hostile.Case
	t.Run("rejected", func(t *testing.T) {
		for _, c := range cases {
			if c.Expect != hostile.Rejected {
				admitted = append(admitted, c)
				continue
			}
			t.Run(c.Name, func(t *testing.T) { hostileRejected(t, c, tally) })
		}
	})
	t.Run("admitted", func(t *testing.T) {
		sem := make(chan struct{}, hostileParallel)
		for _, c := range admitted {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				hostileAdmitted(t, a, c, tally)
			})
		}
	})
	t.Run("agent-alive", func(t *testing.T) {
		select {
		case err := <-a.done:
			tally.add(func(h *hostileTally) { h.crashes++ })
			t.Fatalf("the agent's manager stopped: %v", err)
		default:
		}
		c := &hostile.Case{Name: "after", Expect: hostile.Runs, Deadline: 2 * time.Minute}
		v := newVMI("hostile-after")
		v.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
		u, err := toUnstructured(v)
		if err != nil {
			t.Fatal(err)
		}
		c.VMIs = []*unstructured.Unstructured{u}
		after := &hostileTally{}
		hostileAdmitted(t, a, c, after)
		if after.ran != 1 {
			tally.add(func(h *hostileTally) { h.crashes++ })
			t.Error("a plain VMI created after the hostile cases did not run: the agent no longer reconciles")
		}
	})
	assertNodeNetworkGone(t)
	figure.Report(t, "hostile inputs: %d cases, %d rejected by the API, %d failed with a reason, %d ran, %d crashes, %d stuck, %d leaks, %d other outcomes (%s)",
		tally.cases, tally.rejected, tally.failed, tally.ran, tally.crashes, tally.stuck, tally.leaks, tally.wrong, time.Since(start).Round(time.Second))
}

func toUnstructured(v *vmletv1.VirtualMachineInstance) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := env.Scheme.Convert(v, u, nil); err != nil {
		return nil, err
	}
	u.SetAPIVersion(vmletv1.GroupVersion.String())
	u.SetKind("VirtualMachineInstance")
	return u, nil
}

// createStrict creates obj in namespace default as kubectl does (unknown fields refused).
func createStrict(obj *unstructured.Unstructured) error {
	obj = obj.DeepCopy()
	if obj.GetNamespace() == "" {
		obj.SetNamespace("default")
	}
	return env.Client.Create(context.Background(), obj, client.FieldValidation("Strict"))
}

// hostileRejected: every VMI of the case is refused, as invalid, with the field named.
func hostileRejected(t *testing.T, c *hostile.Case, tally *hostileTally) {
	ok := true
	for _, v := range c.VMIs {
		err := createStrict(v)
		switch {
		case err == nil:
			ok = false
			t.Errorf("%s: admitted, want refused naming %s (%s)", v.GetName(), c.Field, c.About)
			_ = client.IgnoreNotFound(env.Client.Delete(context.Background(), withNS(v)))
		case !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err):
			ok = false
			t.Errorf("%s: refused with %v, want Invalid", v.GetName(), err)
		case !strings.Contains(err.Error(), c.Field) || !strings.Contains(err.Error(), c.Message):
			ok = false
			t.Errorf("%s: message does not name %s (or %q): %v", v.GetName(), c.Field, c.Message, err)
		}
	}
	tally.add(func(h *hostileTally) {
		if ok {
			h.rejected++
		} else {
			h.wrong++
		}
	})
}

func withNS(v *unstructured.Unstructured) *unstructured.Unstructured {
	v = v.DeepCopy()
	if v.GetNamespace() == "" {
		v.SetNamespace("default")
	}
	return v
}

// hostileAdmitted creates the case's Secrets and VMIs, applies its patch, waits for the
// outcome, deletes everything and checks nothing is left.
func hostileAdmitted(t *testing.T, a *agent, c *hostile.Case, tally *hostileTally) {
	ctx := context.Background()
	for _, s := range c.Secrets {
		if err := createStrict(s); err != nil {
			t.Fatalf("secret %s: %v", s.GetName(), err)
		}
		defer func() { _ = env.Client.Delete(ctx, withNS(s)) }()
	}
	var keys []client.ObjectKey
	for _, v := range c.VMIs {
		if err := createStrict(v); err != nil {
			tally.add(func(h *hostileTally) { h.wrong++ })
			t.Errorf("%s: refused, want %s (%s): %v", v.GetName(), c.Expect, c.About, err)
			continue
		}
		keys = append(keys, client.ObjectKey{Namespace: withNS(v).GetNamespace(), Name: v.GetName()})
	}
	if c.Patch != nil {
		for _, k := range keys {
			obj := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}}
			err := env.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, c.Patch))
			t.Logf("%s: patch right after create: %v", k.Name, err)
		}
	}
	outcome := map[string]bool{}
	pids := map[string][]int{}
	for _, k := range keys {
		ok, seen := hostileOutcome(c, k, c.Deadline)
		v, _ := getVMI(t, k)
		uid := string(v.UID)
		if !ok {
			outcome[uid] = false
			if strings.HasPrefix(seen, "stuck") {
				tally.add(func(h *hostileTally) { h.stuck++ })
			} else {
				tally.add(func(h *hostileTally) { h.wrong++ })
			}
			t.Errorf("%s: want %s %s within %s (%s); %s", k.Name, c.Expect, c.Reason, c.Deadline, c.About, seen)
		} else {
			outcome[uid] = true
		}
		if v.Status.Launcher != nil && v.Status.Launcher.PID > 0 {
			pids[uid] = append(pids[uid], int(v.Status.Launcher.PID))
		}
		if st, err := a.runtime.State(uid); err == nil && st.Pid > 0 {
			pids[uid] = append(pids[uid], st.Pid)
		}
	}
	for _, k := range keys {
		v, err := getVMI(t, k)
		if err != nil {
			t.Errorf("%s: %v", k.Name, err)
			continue
		}
		uid := string(v.UID)
		if err := env.Client.Delete(ctx, v); err != nil {
			t.Errorf("delete %s: %v", k.Name, err)
		}
		if gone, seen := pollUntil(90*time.Second, vmiGone(t, k)); !gone {
			tally.add(func(h *hostileTally) { h.stuck++ })
			t.Errorf("%s: deletion did not complete in 90s: %s", k.Name, seen)
			continue
		}
		leaks := &countingTB{TB: t}
		assertNothingLeft(leaks, uid, pids[uid]...)
		assertNoPodNetwork(leaks, uid)
		tally.add(func(h *hostileTally) { h.leaks += min(leaks.n, 1) })
	}
	// The case counts once, when every VMI of it had the outcome.
	for _, ok := range outcome {
		if !ok {
			return
		}
	}
	if len(outcome) == len(c.VMIs) {
		tally.add(func(h *hostileTally) {
			switch c.Expect {
			case hostile.Failed:
				h.failed++
			case hostile.Runs:
				h.ran++
			}
		})
	}
}

// countingTB counts the errors reported through it (leak checks).
type countingTB struct {
	testing.TB
	n int
}

func (c *countingTB) Errorf(format string, args ...any) {
	c.n++
	c.Helper()
	c.TB.Errorf(format, args...)
}

// hostileOutcome waits for the case's outcome on one VMI. A VMI that shows none by the
// deadline is "stuck"; one with another outcome says what it shows.
func hostileOutcome(c *hostile.Case, key client.ObjectKey, d time.Duration) (bool, string) {
	var other string
	final := false
	ok, seen := pollUntil(d, func() (bool, string) {
		v := &vmletv1.VirtualMachineInstance{}
		if err := env.Client.Get(context.Background(), key, v); err != nil {
			return false, err.Error()
		}
		reasons, messages := failureReasons(v)
		switch c.Expect {
		case hostile.Runs:
			if v.Status.Phase == vmletv1.Running {
				return true, ""
			}
			if len(reasons) > 0 {
				other = fmt.Sprintf("failed instead: %v %v", reasons, messages)
			}
		case hostile.Failed:
			for i, r := range reasons {
				if r == c.Reason && strings.Contains(messages[i], c.Message) {
					return true, ""
				}
			}
			if len(reasons) > 0 {
				other = fmt.Sprintf("other reasons: %v %v", reasons, messages)
			} else if v.Status.Phase == vmletv1.Running {
				other = "runs instead"
			}
		}
		if vmistatus.IsFinal(v.Status.Phase) {
			final = true // it will not change: another outcome than the case's
			return true, summary(v)
		}
		return false, summary(v)
	})
	if final && other == "" {
		other = "ended otherwise"
	}
	switch {
	case ok && final:
		return false, other + "; last: " + seen
	case ok:
		return true, ""
	case other != "":
		return false, other + "; last: " + seen
	default:
		return false, "stuck: " + seen
	}
}

// failureReasons are the reasons (and messages) a VMI shows for failing: its Failed phase's,
// a Synchronized=False condition's, its Warning events'.
func failureReasons(v *vmletv1.VirtualMachineInstance) (reasons, messages []string) {
	if v.Status.Phase == vmletv1.Failed {
		reasons, messages = append(reasons, v.Status.Reason), append(messages, "")
	}
	if s := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized); s != nil && s.Status == metav1.ConditionFalse {
		reasons, messages = append(reasons, s.Reason), append(messages, s.Message)
	}
	var l eventsv1.EventList
	if err := env.Client.List(context.Background(), &l, client.InNamespace(v.Namespace)); err == nil {
		for _, e := range l.Items {
			if e.Regarding.UID == v.UID && e.Type == "Warning" {
				reasons, messages = append(reasons, e.Reason), append(messages, e.Note)
			}
		}
	}
	return reasons, messages
}

// pollUntil is eventually without failing the test: whether cond held within d, and what it
// saw last.
func pollUntil(d time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, seen := cond()
		if ok {
			return true, ""
		}
		if time.Now().After(deadline) {
			return false, seen
		}
		<-tick.C
	}
}
