package apienv_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/poll"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestRealAPIServerRoundTrip proves the control-plane binaries the project builds run a real
// kube-apiserver + etcd that installs a CRD, validates it, and round-trips an object through
// both client-go and the built kubectl.
func TestRealAPIServerRoundTrip(t *testing.T) {
	env := startTestEnv(t)
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

// TestRestarts: StopAPIServer refuses clients until StartAPIServer, after which the same
// Config works again and the objects are still there; RestartEtcd keeps them too.
func TestRestarts(t *testing.T) {
	env := startTestEnv(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	get := func() error {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		got := &corev1.ConfigMap{}
		if err := env.Client.Get(c, client.ObjectKeyFromObject(cm), got); err != nil {
			return err
		}
		if got.Data["k"] != "v" {
			return fmt.Errorf("data %v", got.Data)
		}
		return nil
	}
	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err == nil {
		t.Fatal("get succeeded with the API server stopped")
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err != nil {
		t.Fatalf("after API server restart: %v", err)
	}
	if out, err := env.Kubectl("get", "configmap", "kept", "-o", "name"); err != nil || strings.TrimSpace(string(out)) != "configmap/kept" {
		t.Fatalf("kubectl after restart: %v %q", err, out)
	}
	if err := env.RestartEtcd(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, time.Minute, "object readable after etcd restart", func() (bool, string) {
		err := get()
		return err == nil, fmt.Sprint(err)
	})
}

// startTestEnv starts an API server with the testdata CRD, stopped when t ends.
func startTestEnv(t *testing.T) *apienv.Env {
	t.Helper()
	prereq.APIServer(t)
	return apienv.StartT(t, apienv.Options{CRDPaths: []string{filepath.Join("testdata")}})
}
