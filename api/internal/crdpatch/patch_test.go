package main

import (
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// testCRD is a VirtualMachineInstance CRD with a list of objects and a quantity.
func testCRD() *apiextensionsv1.CustomResourceDefinition {
	quantity := apiextensionsv1.JSONSchemaProps{
		XIntOrString: true,
		AnyOf:        []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}},
	}
	disk := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"name": {Type: "string"},
	}}
	spec := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"disks":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &disk}},
		"memory": quantity,
	}}
	return &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "VirtualMachineInstance"},
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: "v1alpha1",
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": spec},
			}},
		}},
	}}
}

func TestPatchCRD(t *testing.T) {
	fields := []vmletv1.UnsupportedField{
		{Parent: "spec", Name: "clock", Kind: vmletv1.KindObject},
		{Parent: "spec.disks[]", Name: "tag", Kind: vmletv1.KindString},
		{Parent: "spec", Name: "maxGuest", Kind: vmletv1.KindQuantity},
	}
	crd := testCRD()
	if err := patchCRD(crd, byKind(fields)); err != nil {
		t.Fatalf("patch: %v", err)
	}
	spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
	if got := spec.Properties["clock"]; got.Type != "object" || len(got.XValidations) != 1 || got.XValidations[0].Rule != "false" {
		t.Errorf("spec.clock = %+v, want an object with rule false", got)
	}
	if got := spec.Properties["disks"].Items.Schema.Properties["tag"]; got.Type != "string" || len(got.XValidations) != 1 {
		t.Errorf("spec.disks[].tag = %+v, want a string with one rule", got)
	}
	for _, name := range []string{"memory", "maxGuest"} {
		if ml := spec.Properties[name].MaxLength; ml == nil || *ml != quantityMaxLength {
			t.Errorf("spec.%s maxLength = %v, want %d", name, ml, quantityMaxLength)
		}
	}

	again := crd.DeepCopy()
	if err := patchCRD(again, byKind(fields)); err != nil {
		t.Fatalf("patch again: %v", err)
	}
	if !reflect.DeepEqual(again, crd) {
		t.Errorf("a second patch changed the CRD")
	}
}

func TestPatchCRDRefusesToShadowARealField(t *testing.T) {
	err := patchCRD(testCRD(), byKind([]vmletv1.UnsupportedField{{Parent: "spec", Name: "memory", Kind: vmletv1.KindQuantity}}))
	if err == nil {
		t.Fatalf("declaring vmlet's own spec.memory unsupported succeeded")
	}
}

func TestPatchCRDRejectsBadPaths(t *testing.T) {
	for _, f := range []vmletv1.UnsupportedField{
		{Parent: "spec.nope", Name: "x", Kind: vmletv1.KindString},
		{Parent: "spec.memory[]", Name: "x", Kind: vmletv1.KindString},
		{Parent: "spec", Name: "x", Kind: "float"},
	} {
		if err := patchCRD(testCRD(), byKind([]vmletv1.UnsupportedField{f})); err == nil {
			t.Errorf("patch with %+v succeeded", f)
		}
	}
}

// byKind declares fields for the test CRD's kind.
func byKind(fields []vmletv1.UnsupportedField) map[string]Declarations {
	return map[string]Declarations{"VirtualMachineInstance": {Fields: fields, Description: "unsupported", Message: "remove it"}}
}

func TestPatchCRDLeavesOtherKinds(t *testing.T) {
	crd := testCRD()
	fields := map[string]Declarations{"MigrationPolicy": {Fields: []vmletv1.UnsupportedField{{Parent: "spec", Name: "clock", Kind: vmletv1.KindObject}}}}
	if err := patchCRD(crd, fields); err != nil {
		t.Fatalf("patch: %v", err)
	}
	if _, ok := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["clock"]; ok {
		t.Errorf("a MigrationPolicy field was declared in the VirtualMachineInstance CRD")
	}
}
