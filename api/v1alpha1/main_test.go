package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// One API server for the whole package, started by the first test that needs it (the pure
// tests run without one) and stopped by TestMain.
var (
	envOnce sync.Once
	envVal  *apienv.Env
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if envVal != nil {
		if err := envVal.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop api server: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// apiServer returns the package's API server with vmlet's CRDs installed.
func apiServer(t *testing.T) *apienv.Env {
	t.Helper()
	prereq.APIServer(t)
	envOnce.Do(func() {
		envVal, envErr = apienv.Start(apienv.Options{
			AddToScheme: []func(*runtime.Scheme) error{vmletv1.AddToScheme, apiextensionsv1.AddToScheme},
		})
	})
	if envErr != nil {
		t.Fatalf("start api server: %v", envErr)
	}
	return envVal
}

// testContext is the deadline for one test's API calls.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// validVMI is the base that invalid cases mutate: every list has one entry, so that a case can
// reach into it by index.
func validVMI(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "vmlet.dev/v1alpha1",
		"kind":       "VirtualMachineInstance",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{
			"domain": map[string]any{
				"cpu":    map[string]any{"cores": int64(1)},
				"memory": map[string]any{"guest": "128Mi"},
				"devices": map[string]any{
					"disks": []any{map[string]any{"name": "root", "disk": map[string]any{"bus": "virtio"}}},
					"interfaces": []any{map[string]any{
						"name": "default", "masquerade": map[string]any{},
						"ports": []any{map[string]any{"name": "http", "port": int64(80), "protocol": "TCP"}},
					}},
				},
			},
			"networks": []any{map[string]any{"name": "default", "pod": map[string]any{}}},
			"volumes": []any{map[string]any{
				"name": "root", "containerDisk": map[string]any{"image": "example.org/guest:1"},
			}},
		},
	}}
}

// at returns the object at a path such as "spec.domain.devices.disks[0]" in o.
func at(t *testing.T, o *unstructured.Unstructured, path string) map[string]any {
	t.Helper()
	var cur any = o.Object
	for _, part := range strings.Split(path, ".") {
		name, idx, hasIdx := strings.Cut(strings.TrimSuffix(part, "]"), "[")
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("path %s: %s is not an object", path, name)
		}
		cur = m[name]
		if hasIdx {
			i, err := strconv.Atoi(idx)
			l, ok := cur.([]any)
			if err != nil || !ok || i >= len(l) {
				t.Fatalf("path %s: no item %s of %s", path, idx, name)
			}
			cur = l[i]
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("path %s is not an object", path)
	}
	return m
}

// wantRejected asserts err is an API StatusError with the given reason and a structured cause
// on exactly field, of the given type ("" = any type).
func wantRejected(t *testing.T, err error, reason metav1.StatusReason, causeType metav1.CauseType, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want %s on %s", reason, field)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error %v is not an API status", err)
	}
	st := status.Status()
	if st.Reason != reason {
		t.Fatalf("reason = %s, want %s (%v)", st.Reason, reason, err)
	}
	if st.Details == nil {
		t.Fatalf("no status details in %v", err)
	}
	for _, c := range st.Details.Causes {
		if c.Field == field && (causeType == "" || c.Type == causeType) {
			return
		}
	}
	t.Fatalf("no cause of type %q on %s in %+v", causeType, field, st.Details.Causes)
}

// wantBadRequest asserts err is a 400 BadRequest whose message names the offending field. The
// API server reports strict decoding errors (unknown fields) without structured causes, so the
// status message is the only place that names the field.
func wantBadRequest(t *testing.T, err error, field string) {
	t.Helper()
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error %v is not an API status", err)
	}
	if st := status.Status(); st.Reason != metav1.StatusReasonBadRequest || !strings.Contains(st.Message, field) {
		t.Fatalf("status = %s %q, want BadRequest naming %s", st.Reason, st.Message, field)
	}
}
