package vmistatus_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/vmistatus"
)

func vmiIn(p vmletv1.VirtualMachineInstancePhase) *vmletv1.VirtualMachineInstance {
	v := &vmletv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
	v.Status.Phase = p
	return v
}

func phases(v *vmletv1.VirtualMachineInstance) []vmletv1.VirtualMachineInstancePhase {
	var out []vmletv1.VirtualMachineInstancePhase
	for _, ts := range v.Status.PhaseTransitionTimestamps {
		out = append(out, ts.Phase)
	}
	return out
}

// cond returns condition t as "Status/Reason/Message@ObservedGeneration", "" when absent.
func cond(v *vmletv1.VirtualMachineInstance, t string) string {
	c := meta.FindStatusCondition(v.Status.Conditions, t)
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%s/%s/%s@%d", c.Status, c.Reason, c.Message, c.ObservedGeneration)
}

func TestIsFinal(t *testing.T) {
	for p, want := range map[vmletv1.VirtualMachineInstancePhase]bool{
		"": false, vmletv1.Pending: false, vmletv1.Scheduling: false, vmletv1.Scheduled: false,
		vmletv1.Running: false, vmletv1.Succeeded: true, vmletv1.Failed: true,
	} {
		if got := vmistatus.IsFinal(p); got != want {
			t.Errorf("IsFinal(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestSetPhase: each change is recorded once with its time; final phases are sticky.
func TestSetPhase(t *testing.T) {
	v := vmiIn("")
	for _, p := range []vmletv1.VirtualMachineInstancePhase{vmletv1.Pending, vmletv1.Scheduled, vmletv1.Scheduled, vmletv1.Running, vmletv1.Succeeded, vmletv1.Failed, vmletv1.Running} {
		vmistatus.SetPhase(v, p)
	}
	want := []vmletv1.VirtualMachineInstancePhase{vmletv1.Pending, vmletv1.Scheduled, vmletv1.Running, vmletv1.Succeeded}
	if got := phases(v); !slices.Equal(got, want) || v.Status.Phase != vmletv1.Succeeded {
		t.Errorf("phase %s, transitions %v; want Succeeded, %v", v.Status.Phase, got, want)
	}
	for _, ts := range v.Status.PhaseTransitionTimestamps {
		if ts.PhaseTransitionTimestamp.IsZero() {
			t.Errorf("transition to %s has no time", ts.Phase)
		}
	}
}

// TestSetCondition: the status follows ok, ObservedGeneration is the VMI's generation, and the
// transition time stays while the status does.
func TestSetCondition(t *testing.T) {
	v := vmiIn(vmletv1.Running)
	vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonStarting, "starting")
	if got, want := cond(v, vmletv1.VirtualMachineInstanceReady), "False/Starting/starting@3"; got != want {
		t.Fatalf("Ready = %s, want %s", got, want)
	}
	c := meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	c.LastTransitionTime = metav1.Unix(1, 0)
	v.Generation = 4
	vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceReady, false, vmistatus.ReasonPaused, "paused")
	c = meta.FindStatusCondition(v.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	if got, want := cond(v, vmletv1.VirtualMachineInstanceReady), "False/Paused/paused@4"; got != want || !c.LastTransitionTime.Equal(&metav1.Time{Time: metav1.Unix(1, 0).Time}) {
		t.Errorf("Ready = %s (transition %v), want %s with the first transition time", got, c.LastTransitionTime, want)
	}
	vmistatus.SetCondition(v, vmletv1.VirtualMachineInstanceReady, true, vmistatus.ReasonRunning, "up")
	if got, want := cond(v, vmletv1.VirtualMachineInstanceReady), "True/Running/up@4"; got != want {
		t.Errorf("Ready = %s, want %s", got, want)
	}
}

func TestSynchronized(t *testing.T) {
	v := vmiIn(vmletv1.Scheduled)
	vmistatus.NotSynchronized(v, vmistatus.ReasonUnknownNetwork, "waiting for net1")
	if got, want := cond(v, vmletv1.VirtualMachineInstanceSynchronized), "False/UnknownNetwork/waiting for net1@3"; got != want {
		t.Errorf("Synchronized = %s, want %s", got, want)
	}
	vmistatus.Synchronized(v)
	if got, want := cond(v, vmletv1.VirtualMachineInstanceSynchronized), "True/Synced/domain matches the spec@3"; got != want {
		t.Errorf("Synchronized = %s, want %s", got, want)
	}
	if v.Status.Phase != vmletv1.Scheduled || v.Status.Reason != "" {
		t.Errorf("phase %s reason %q: the Synchronized setters changed them", v.Status.Phase, v.Status.Reason)
	}
}

// TestFail: Fail ends a VMI that is not final (and says so once), updates a Failed one's
// reason, and leaves a Succeeded one alone.
func TestFail(t *testing.T) {
	tests := []struct {
		from       vmletv1.VirtualMachineInstancePhase
		wantFailed bool
		wantPhase  vmletv1.VirtualMachineInstancePhase
		wantReason string
		wantCond   string
	}{
		{vmletv1.Scheduling, true, vmletv1.Failed, "QEMUDied", "False/QEMUDied/boom@3"},
		{vmletv1.Running, true, vmletv1.Failed, "QEMUDied", "False/QEMUDied/boom@3"},
		{vmletv1.Failed, false, vmletv1.Failed, "QEMUDied", "False/QEMUDied/boom@3"},
		{vmletv1.Succeeded, false, vmletv1.Succeeded, "", ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.from), func(t *testing.T) {
			v := vmiIn(tt.from)
			if got := vmistatus.Fail(v, vmistatus.ReasonQEMUDied, "boom"); got != tt.wantFailed {
				t.Errorf("Fail = %v, want %v", got, tt.wantFailed)
			}
			if v.Status.Phase != tt.wantPhase || v.Status.Reason != tt.wantReason {
				t.Errorf("phase %s reason %q, want %s %q", v.Status.Phase, v.Status.Reason, tt.wantPhase, tt.wantReason)
			}
			for _, c := range []string{vmletv1.VirtualMachineInstanceSynchronized, vmletv1.VirtualMachineInstanceReady} {
				if got := cond(v, c); got != tt.wantCond {
					t.Errorf("%s = %q, want %q", c, got, tt.wantCond)
				}
			}
		})
	}
}

// TestSucceed: a guest that powered off ends a VMI that is not final; a final one stays.
func TestSucceed(t *testing.T) {
	tests := []struct {
		from                  vmletv1.VirtualMachineInstancePhase
		want                  bool
		wantPhase             vmletv1.VirtualMachineInstancePhase
		wantReason, wantReady string
	}{
		{vmletv1.Running, true, vmletv1.Succeeded, "GuestShutdown", "False/GuestShutdown/the guest powered off@3"},
		{vmletv1.Scheduled, true, vmletv1.Succeeded, "GuestShutdown", "False/GuestShutdown/the guest powered off@3"},
		{vmletv1.Succeeded, false, vmletv1.Succeeded, "", ""},
		{vmletv1.Failed, false, vmletv1.Failed, "", ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.from), func(t *testing.T) {
			v := vmiIn(tt.from)
			if got := vmistatus.Succeed(v); got != tt.want {
				t.Errorf("Succeed = %v, want %v", got, tt.want)
			}
			if v.Status.Phase != tt.wantPhase || v.Status.Reason != tt.wantReason {
				t.Errorf("phase %s reason %q, want %s %q", v.Status.Phase, v.Status.Reason, tt.wantPhase, tt.wantReason)
			}
			if got := cond(v, vmletv1.VirtualMachineInstanceReady); got != tt.wantReady {
				t.Errorf("Ready = %q, want %q", got, tt.wantReady)
			}
			if got := cond(v, vmletv1.VirtualMachineInstanceSynchronized); got != "" {
				t.Errorf("Synchronized = %q, want none", got)
			}
		})
	}
}

func TestPausedReason(t *testing.T) {
	for in, want := range map[string]vmistatus.Reason{
		"":            "PausedByUser",
		"user":        "PausedByUser",
		"migration":   "PausedForMigration",
		"postmigrate": "PausedForMigration",
		"io-error":    "PausedIOError",
		"watchdog":    "Paused",
	} {
		if got := vmistatus.PausedReason(in); got != want {
			t.Errorf("PausedReason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeepTransitionTimes(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	before := &vmletv1.VirtualMachineInstanceStatus{Conditions: []metav1.Condition{
		{Type: vmletv1.VirtualMachineInstanceSynchronized, Status: metav1.ConditionFalse, Reason: "ErrImagePull", LastTransitionTime: then},
		{Type: vmletv1.VirtualMachineInstanceReady, Status: metav1.ConditionFalse, Reason: "Starting", LastTransitionTime: then},
	}}
	vmi := &vmletv1.VirtualMachineInstance{Status: *before.DeepCopy()}
	// One pass: observe sets both True, then storage fails again: Synchronized back to False.
	vmistatus.Synchronized(vmi)
	vmistatus.SetCondition(vmi, vmletv1.VirtualMachineInstanceReady, true, vmistatus.ReasonRunning, "")
	vmistatus.NotSynchronized(vmi, vmistatus.ReasonImagePullBackOff, "waiting")
	vmistatus.KeepTransitionTimes(before, vmi)
	sync := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceSynchronized)
	if !sync.LastTransitionTime.Equal(&then) || sync.Reason != string(vmistatus.ReasonImagePullBackOff) {
		t.Errorf("Synchronized False → True → False in one pass: %+v, want reason ImagePullBackOff since %s", sync, then)
	}
	ready := meta.FindStatusCondition(vmi.Status.Conditions, vmletv1.VirtualMachineInstanceReady)
	if ready.LastTransitionTime.Equal(&then) {
		t.Errorf("Ready turned True but kept the old transition time %s", then)
	}
}
