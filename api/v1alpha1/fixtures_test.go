package v1alpha1_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/apienv"
)

// kubevirtFixtures reads the unmodified KubeVirt example VMIs from shared/, beside the repo.
func kubevirtFixtures(t *testing.T) map[string][]byte {
	t.Helper()
	dir := filepath.Join(apienv.RepoRoot(), "..", "shared", "kubevirt-examples")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatalf("list fixtures: %v", err)
	}
	if len(files) < 9 {
		t.Fatalf("found %d KubeVirt fixtures in %s, want at least 9", len(files), dir)
	}
	out := make(map[string][]byte, len(files))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read fixture: %v", err)
		}
		out[filepath.Base(f)] = data
	}
	return out
}

// TestKubeVirtFixturesDecodeStrictly decodes each fixture into the Go types, rejecting unknown
// fields: the Go types carry every field the fixtures use, with KubeVirt's JSON names.
func TestKubeVirtFixturesDecodeStrictly(t *testing.T) {
	for name, data := range kubevirtFixtures(t) {
		t.Run(name, func(t *testing.T) {
			vmi := &vmletv1.VirtualMachineInstance{}
			if err := yaml.UnmarshalStrict(data, vmi); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if vmi.Kind != "VirtualMachineInstance" || vmi.Name == "" {
				t.Fatalf("decoded kind %q name %q", vmi.Kind, vmi.Name)
			}
		})
	}
}

// TestKubeVirtFixturesAccepted creates each fixture with only its apiVersion changed, with
// strict field validation, and checks that the API server stored the spec unchanged (nothing
// pruned or defaulted).
func TestKubeVirtFixturesAccepted(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	for name, data := range kubevirtFixtures(t) {
		t.Run(name, func(t *testing.T) {
			o := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(data, &o.Object); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if o.GetAPIVersion() != "kubevirt.io/v1" {
				t.Fatalf("fixture apiVersion = %q, want kubevirt.io/v1", o.GetAPIVersion())
			}
			o.SetAPIVersion(vmletv1.GroupVersion.String())
			o.SetNamespace("default")
			o.SetName("fixture-" + o.GetName())
			want := o.DeepCopy().Object["spec"]
			if err := env.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
				t.Fatalf("create: %v", err)
			}
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(o.GroupVersionKind())
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
				t.Fatalf("get: %v", err)
			}
			if !reflect.DeepEqual(normalize(t, want), normalize(t, got.Object["spec"])) {
				t.Errorf("stored spec differs from the manifest\nsent: %v\ngot:  %v", want, got.Object["spec"])
			}
		})
	}
}

// normalize round-trips v through JSON so that numbers compare equal whatever decoder made them.
func normalize(t *testing.T, v any) any {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var out any
	if err := yaml.Unmarshal(data, &out); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

// TestSamplesAccepted creates the manifests in config/samples (all but the kustomization) with
// strict field validation.
func TestSamplesAccepted(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	files, err := filepath.Glob(filepath.Join(apienv.RepoRoot(), "config", "samples", "*.yaml"))
	if err != nil || len(files) < 5 {
		t.Fatalf("list samples: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read sample: %v", err)
		}
		o := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &o.Object); err != nil {
			t.Fatalf("decode %s: %v", f, err)
		}
		o.SetNamespace("default")
		o.SetName("samples-" + o.GetName())
		if err := env.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
			t.Errorf("create %s: %v", filepath.Base(f), err)
		}
	}
}
