package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
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
		"migrations.vmlet.dev_migrationpolicies.yaml",
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

// vmiSpecSchema returns the spec schema of the generated VirtualMachineInstance CRD.
func vmiSpecSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	crd := loadCRD(t, "vmlet.dev_virtualmachineinstances.yaml")
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// TestEverySpecFieldIsImmutable fails when a field is added to spec, spec.domain or
// spec.domain.devices without an immutability rule (a transition rule on spec naming it).
func TestEverySpecFieldIsImmutable(t *testing.T) {
	spec := vmiSpecSchema(t)
	var rules strings.Builder
	for _, r := range spec.XValidations {
		rules.WriteString(r.Rule + "\n")
	}
	mutable := map[string]bool{"paused": true}
	levels := []struct {
		prefix string
		schema apiextensionsv1.JSONSchemaProps
	}{
		{"", spec},
		{"domain.", spec.Properties["domain"]},
		{"domain.devices.", spec.Properties["domain"].Properties["devices"]},
	}
	checked := 0
	for _, l := range levels {
		for name, p := range l.schema.Properties {
			path := l.prefix + name
			if mutable[name] || path == "domain" || path == "domain.devices" || isUnsupported(p) {
				continue
			}
			checked++
			if !regexp.MustCompile(`oldSelf\.` + regexp.QuoteMeta(path) + `\b`).MatchString(rules.String()) {
				t.Errorf("spec.%s has no immutability rule on spec", path)
			}
		}
	}
	if checked < 15 {
		t.Fatalf("checked %d fields, the walk is broken", checked)
	}
}

func isUnsupported(p apiextensionsv1.JSONSchemaProps) bool {
	return len(p.XValidations) == 1 && p.XValidations[0].Rule == "false" && p.XValidations[0].Message == vmletv1.UnsupportedMessage
}

// TestUnsupportedFieldsAreDeclared checks that hack/generate.sh's patch step ran: every
// unsupported KubeVirt field is in the CRD with its always-failing rule.
func TestUnsupportedFieldsAreDeclared(t *testing.T) {
	spec := vmiSpecSchema(t)
	for _, f := range vmletv1.UnsupportedFields {
		s := spec
		for _, part := range strings.Split(strings.TrimPrefix(f.Parent, "spec"), ".")[1:] {
			name, list := strings.CutSuffix(part, "[]")
			s = s.Properties[name]
			if list {
				s = *s.Items.Schema
			}
		}
		if p, ok := s.Properties[f.Name]; !ok || !isUnsupported(p) {
			t.Errorf("%s.%s is not declared unsupported in the CRD", f.Parent, f.Name)
		}
	}
}
