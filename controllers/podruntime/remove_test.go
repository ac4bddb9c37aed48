package podruntime

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestRemoveLeavesATerminatingPodsLauncher: while the launcher's pod is being deleted within
// its grace period (the kubelet's SIGTERM: the guest is shutting down), Remove does not kill
// the launcher (ErrPodTerminating); past the pod's deletion deadline it does. On a real kubelet
// `kubectl delete pod` failed the VMI (LauncherPodDeleted) and the agent's teardown SIGKILLed
// the launcher mid-shutdown.
func TestRemoveLeavesATerminatingPodsLauncher(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deadline time.Time
		kills    bool
	}{
		{"within the grace period", time.Now().Add(time.Hour), false},
		{"past the deletion deadline", time.Now().Add(-time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id = "uid-term"
			pod := launcherPod(id)
			pod.Finalizers = []string{"test/keep"} // the fake client keeps a deleting object only with one
			pod.DeletionTimestamp = &metav1.Time{Time: tc.deadline}
			r := newRuntime(t, pod)
			cmd := serve(t, r, id)
			err := r.Remove(context.Background(), id)
			_, alive := startTime(cmd.Process.Pid)
			switch {
			case !tc.kills && !errors.Is(err, ErrPodTerminating):
				t.Fatalf("Remove = %v, want ErrPodTerminating", err)
			case !tc.kills && alive != nil:
				t.Fatal("Remove killed the launcher of a pod within its grace period")
			case tc.kills && (err != nil || alive == nil):
				t.Fatalf("Remove = %v, launcher alive %v; want it killed and removed", err, alive == nil)
			}
		})
	}
}
