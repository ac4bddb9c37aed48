package local

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// TestNextDemoStep: a demo VMI left on a node this run does not have (an earlier run with more
// nodes) is left alone rather than deleted and waited for: no agent of this run would ever
// remove its finalizer (found by hand: `make run` after `make run LOCAL_ARGS="--nodes 2"` hung
// 2 minutes, then failed).
func TestNextDemoStep(t *testing.T) {
	vmi := func(node string, phase vmletv1.VirtualMachineInstancePhase, deleting bool) *vmletv1.VirtualMachineInstance {
		v := &vmletv1.VirtualMachineInstance{}
		v.Status.NodeName, v.Status.Phase = node, phase
		if deleting {
			now := metav1.NewTime(time.Now())
			v.DeletionTimestamp = &now
		}
		return v
	}
	ours := []string{"vm"}
	for _, tc := range []struct {
		name string
		old  *vmletv1.VirtualMachineInstance
		want demoStep
	}{
		{"none", nil, demoCreate},
		{"running here", vmi("vm", vmletv1.Running, false), demoAdopt},
		{"pending, no node yet", vmi("", vmletv1.Pending, false), demoAdopt},
		{"failed here", vmi("vm", vmletv1.Failed, false), demoReplace},
		{"deleting here", vmi("vm", vmletv1.Running, true), demoReplace},
		{"failed on an earlier run's node", vmi("vm-1", vmletv1.Failed, false), demoUnserved},
		{"running on an earlier run's node", vmi("vm-2", vmletv1.Running, false), demoUnserved},
	} {
		if got := nextDemoStep(tc.old, ours); got != tc.want {
			t.Errorf("%s: step %d, want %d", tc.name, got, tc.want)
		}
	}
}
