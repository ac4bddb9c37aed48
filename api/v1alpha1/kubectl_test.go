package v1alpha1_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestPrinterColumns fetches the installed CRD and checks kubectl's columns.
func TestPrinterColumns(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "virtualmachineinstances.vmlet.dev"}, crd); err != nil {
		t.Fatalf("get CRD: %v", err)
	}
	type column struct {
		Name, JSONPath string
		Priority       int32
	}
	var got []column
	for _, c := range crd.Spec.Versions[0].AdditionalPrinterColumns {
		got = append(got, column{c.Name, c.JSONPath, c.Priority})
	}
	want := []column{
		{"Age", ".metadata.creationTimestamp", 0},
		{"Phase", ".status.phase", 0},
		{"IP", ".status.interfaces[0].ipAddress", 0},
		{"NodeName", ".status.nodeName", 0},
		{"Ready", ".status.conditions[?(@.type=='Ready')].status", 0},
		{"Live-Migratable", ".status.conditions[?(@.type=='LiveMigratable')].status", 1},
		{"Paused", ".status.conditions[?(@.type=='Paused')].status", 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("printer columns = %+v, want %+v", got, want)
	}
	if names := crd.Spec.Names.ShortNames; !reflect.DeepEqual(names, []string{"vmi", "vmis"}) {
		t.Fatalf("short names = %v, want [vmi vmis]", names)
	}
}

// TestKubectl checks what a user sees: columns of `kubectl get vmi`, and that kubectl's default
// (strict) validation rejects an unknown field.
func TestKubectl(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	if err := env.Client.Create(ctx, validVMI("kubectl-get")); err != nil {
		t.Fatalf("create: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "vmi", "kubectl-get"}, []string{"NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"}},
		{[]string{"get", "vmi", "kubectl-get", "-o", "wide"}, []string{"NAME", "AGE", "PHASE", "IP", "NODENAME", "READY", "LIVE-MIGRATABLE", "PAUSED"}},
	} {
		out, err := env.Kubectl(tc.args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", tc.args, err, out)
		}
		if header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0]); !reflect.DeepEqual(header, tc.want) {
			t.Errorf("kubectl %v header = %v, want %v", tc.args, header, tc.want)
		}
	}

	manifest := validVMI("kubectl-unknown")
	at(t, manifest, "spec.domain")["bogus"] = true
	data, err := manifest.MarshalJSON()
	if err != nil {
		t.Fatalf("encode manifest: %v", err)
	}
	file := filepath.Join(t.TempDir(), "vmi.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatalf("write manifest: %v", err)
	}
	if out, err := env.Kubectl("create", "-f", file); err == nil {
		t.Fatalf("kubectl create with an unknown field succeeded:\n%s", out)
	}
	err = env.Client.Get(ctx, client.ObjectKeyFromObject(manifest), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": manifest.GetAPIVersion(), "kind": manifest.GetKind(),
	}})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get after rejected create: %v, want NotFound", err)
	}
}

// warnings records the API server's warning headers.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// TestUnknownFieldWithoutStrictValidation documents the API server's default (Warn) for fields
// that are neither vmlet's nor declared unsupported: the object is created, the field is pruned
// and a warning names it. vmlet's clients therefore use fieldValidation=Strict.
func TestUnknownFieldWithoutStrictValidation(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	rec := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandler = rec
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	o := validVMI("unknown-warn")
	at(t, o, "spec.domain")["bogus"] = true
	if err := c.Create(ctx, o); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, found := at(t, o, "spec.domain")["bogus"]; found {
		t.Errorf("spec.domain.bogus was stored, want it pruned")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, m := range rec.msgs {
		if strings.Contains(m, `unknown field "spec.domain.bogus"`) {
			return
		}
	}
	t.Errorf("warnings = %q, want one naming spec.domain.bogus", rec.msgs)
}
