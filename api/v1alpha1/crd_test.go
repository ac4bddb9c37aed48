package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"
)

// crdDir holds the generated CRDs, relative to this package.
const crdDir = "../../config/crd/bases"

func loadCRD(t *testing.T, file string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(crdDir, file))
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("decode CRD %s: %v", file, err)
	}
	return crd
}

// TestCRDsPassAPIServerValidation runs the API server's own CRD validation, which compiles
// every CEL rule and rejects CRDs whose estimated rule cost exceeds the budget.
func TestCRDsPassAPIServerValidation(t *testing.T) {
	for _, file := range []string{
		"vmlet.dev_virtualmachineinstances.yaml",
		"vmlet.dev_virtualmachineinstancemigrations.yaml",
	} {
		t.Run(file, func(t *testing.T) {
			crd := loadCRD(t, file)
			internal := &apiextensions.CustomResourceDefinition{}
			if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, internal, nil); err != nil {
				t.Fatalf("convert CRD: %v", err)
			}
			internal.Status.StoredVersions = []string{"v1alpha1"}
			for _, e := range validation.ValidateCustomResourceDefinition(context.Background(), internal) {
				t.Errorf("%s", e)
			}
		})
	}
}
