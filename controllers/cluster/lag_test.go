package cluster_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/cluster"
)

// blindCache is a client whose pod lists come back empty: a cache that has not seen the pods
// created since it synced (the worst case of its lag).
type blindCache struct{ client.Client }

func (c blindCache) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if _, ok := l.(*corev1.PodList); ok {
		return nil
	}
	return c.Client.List(ctx, l, opts...)
}

// TestCacheLagMakesNoSecondPod: reconciles that never see the pod in their cache still find it
// on the API server and create no second one.
func TestCacheLagMakesNoSecondPod(t *testing.T) {
	vmi := newVMI(t, namespace(t), "lag", nil)
	r := &cluster.Reconciler{Client: blindCache{env.Client}, APIReader: env.Client,
		Recorder: events.NewFakeRecorder(100), Pods: testPods}
	for range 5 {
		if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(vmi)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(podsOf(t, vmi)); n != 1 {
		t.Fatalf("%d launcher pods after 5 reconciles with a lagging cache", n)
	}
	if got := getVMI(t, vmi); got.Status.Phase != vmletv1.Scheduling {
		t.Errorf("VMI %s", summary(got))
	}
}
