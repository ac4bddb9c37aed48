package local

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestControlPlanePersists starts the embedded control plane, creates an object, stops it, starts
// it again on the same state folder and finds the object: a second `make run` picks up the same
// state. A watch a client keeps open does not hold the stop (kubectl get -w during Ctrl-C).
func TestControlPlanePersists(t *testing.T) {
	prereq.APIServer(t)
	assets, err := apienv.ControlPlaneAssets()
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		StateDir:  t.TempDir(),
		AssetsDir: assets,
		CRDDirs:   []string{filepath.Join(apienv.RepoRoot(), "test", "apienv", "testdata")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gvk := schema.GroupVersionKind{Group: "test.vmlet.dev", Version: "v1", Kind: "Widget"}

	cp, err := StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(gvk)
	w.SetNamespace("default")
	w.SetName("persisted")
	if err := cp.Client.Create(ctx, w); err != nil {
		_ = cp.Stop()
		t.Fatalf("create: %v", err)
	}
	// A client's open watch (kubectl get -w) does not hold the stop: the API server ends it.
	wc, err := client.NewWithWatch(cp.Config, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind("WidgetList"))
	watch, err := wc.Watch(ctx, list, client.InNamespace("default"))
	if err != nil {
		_ = cp.Stop()
		t.Fatalf("watch: %v", err)
	}
	defer watch.Stop()
	if err := cp.Stop(); err != nil {
		t.Fatalf("stop with a watch open: %v", err)
	}

	cp, err = StartControlPlane(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	}()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(gvk)
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatalf("object lost across restart: %v", err)
	}
	if got.GetUID() != w.GetUID() {
		t.Fatalf("uid changed across restart: %s != %s", got.GetUID(), w.GetUID())
	}
}
