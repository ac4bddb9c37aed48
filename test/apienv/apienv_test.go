package apienv_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestRealAPIServerRoundTrip proves the control-plane binaries the project builds run a real
// kube-apiserver + etcd that installs a CRD, validates it, and round-trips an object through
// both client-go and the built kubectl.
func TestRealAPIServerRoundTrip(t *testing.T) {
	prereq.APIServer(t)
	env, err := apienv.Start(apienv.Options{CRDPaths: []string{filepath.Join("testdata")}})
	if err != nil {
		t.Fatalf("start api server: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	out, err := env.Kubectl("version", "-o", "json")
	if err != nil || !strings.Contains(string(out), `"gitVersion": "v1.37.2"`) {
		t.Fatalf("kubectl version: %v\n%s", err, out)
	}
	t.Logf("kube-apiserver and kubectl report v1.37.2")

	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(apienv.GVK("test.vmlet.dev", "v1", "Widget"))
	w.SetNamespace("default")
	w.SetName("w1")
	if err := unstructured.SetNestedField(w.Object, int64(3), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(w.GroupVersionKind())
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
		t.Fatalf("get widget: %v", err)
	}
	if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
		t.Fatalf("spec.size = %d, want 3", size)
	}
	if err := unstructured.SetNestedField(got.Object, "Ready", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(ctx, got); err != nil {
		t.Fatalf("update status: %v", err)
	}
	out, err = env.Kubectl("get", "widgets", "w1", "-n", "default", "-o", "jsonpath={.status.phase}")
	if err != nil || string(out) != "Ready" {
		t.Fatalf("kubectl get status: %v %q", err, out)
	}

	// The schema is enforced by the real server.
	bad := w.DeepCopy()
	bad.SetName("w2")
	bad.SetResourceVersion("")
	if err := unstructured.SetNestedField(bad.Object, int64(0), "spec", "size"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Fatalf("create with size 0: got %v, want Invalid", err)
	}
}
