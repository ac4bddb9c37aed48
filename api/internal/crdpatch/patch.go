package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// quantityMaxLength bounds the string form of every quantity. The longest sane quantity
// ("9223372036854775807", "1.5e+18", "123456789Ki") is far shorter.
const quantityMaxLength = 64

// Declarations are the unsupported fields of one kind and how their rule says it.
type Declarations struct {
	Fields      []vmletv1.UnsupportedField
	Description string // of each declared field's schema
	Message     string // of its always-failing rule
}

// patchFile reads one CRD manifest, patches it and writes it back in controller-gen's layout.
func patchFile(path string, unsupported map[string]Declarations) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return fmt.Errorf("decode CRD %s: %w", path, err)
	}
	if err := patchCRD(crd, unsupported); err != nil {
		return fmt.Errorf("patch CRD %s: %w", path, err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return fmt.Errorf("encode CRD %s: %w", path, err)
	}
	// controller-gen writes no status and starts documents with "---".
	out = bytes.Replace(out, []byte("status:\n  acceptedNames:\n    kind: \"\"\n    plural: \"\"\n  conditions: null\n  storedVersions: null\n"), nil, 1)
	out = append([]byte("---\n"), out...)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return fmt.Errorf("write CRD: %w", err)
	}
	return nil
}

// patchCRD applies both patches to every version of crd; unsupported lists the fields to
// declare by the kind of the CRD.
func patchCRD(crd *apiextensionsv1.CustomResourceDefinition, unsupported map[string]Declarations) error {
	for i := range crd.Spec.Versions {
		v := &crd.Spec.Versions[i]
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return fmt.Errorf("version %s has no schema", v.Name)
		}
		root := v.Schema.OpenAPIV3Schema
		d := unsupported[crd.Spec.Names.Kind]
		for _, f := range d.Fields {
			if err := declareUnsupported(root, f, d); err != nil {
				return err
			}
		}
		boundQuantities(root)
	}
	return nil
}

// boundQuantities sets maxLength on every int-or-string node below s that has none.
func boundQuantities(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	if s.XIntOrString && s.MaxLength == nil {
		n := int64(quantityMaxLength)
		s.MaxLength = &n
	}
	for k, p := range s.Properties {
		boundQuantities(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		boundQuantities(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		boundQuantities(s.AdditionalProperties.Schema)
	}
}

// declareUnsupported adds f to the schema below root, with a rule that always fails. It is a
// no-op if f was declared by an earlier run, and an error if vmlet's own schema has the field.
func declareUnsupported(root *apiextensionsv1.JSONSchemaProps, f vmletv1.UnsupportedField, d Declarations) error {
	want, err := unsupportedSchema(f, d)
	if err != nil {
		return err
	}
	return edit(root, strings.Split(f.Parent, "."), func(parent *apiextensionsv1.JSONSchemaProps) error {
		if have, ok := parent.Properties[f.Name]; ok {
			if have.Description == want.Description {
				return nil
			}
			return fmt.Errorf("declare unsupported %s.%s: vmlet's schema already has the field", f.Parent, f.Name)
		}
		if parent.Properties == nil {
			parent.Properties = map[string]apiextensionsv1.JSONSchemaProps{}
		}
		parent.Properties[f.Name] = want
		return nil
	})
}

// edit applies fn to the schema at path (property names, "[]" marking list items) below s.
// Properties are stored by value, so each level writes its edited copy back.
func edit(s *apiextensionsv1.JSONSchemaProps, path []string, fn func(*apiextensionsv1.JSONSchemaProps) error) error {
	if len(path) == 0 {
		return fn(s)
	}
	name, list := strings.CutSuffix(path[0], "[]")
	p, ok := s.Properties[name]
	if !ok {
		return fmt.Errorf("look up schema: no property %q", name)
	}
	target := &p
	if list {
		if p.Items == nil || p.Items.Schema == nil {
			return fmt.Errorf("look up schema: %q is not a list", name)
		}
		target = p.Items.Schema
	}
	if err := edit(target, path[1:], fn); err != nil {
		return err
	}
	s.Properties[name] = p
	return nil
}

// unsupportedSchema is the declaration of one unsupported field: its JSON kind, so that the
// value is not pruned and CEL can see it, and a rule that rejects any value.
func unsupportedSchema(f vmletv1.UnsupportedField, d Declarations) (apiextensionsv1.JSONSchemaProps, error) {
	s := apiextensionsv1.JSONSchemaProps{
		Description: d.Description,
		XValidations: apiextensionsv1.ValidationRules{{
			Rule:    "false",
			Message: d.Message,
			Reason:  ptr(apiextensionsv1.FieldValueForbidden),
		}},
	}
	preserve := true
	anyObject := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
	switch f.Kind {
	case vmletv1.KindObject:
		s.Type = "object"
		s.XPreserveUnknownFields = &preserve
	case vmletv1.KindArray:
		s.Type = "array"
		s.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &anyObject}
	case vmletv1.KindString, vmletv1.KindBoolean, vmletv1.KindInteger:
		s.Type = f.Kind
	case vmletv1.KindQuantity:
		s.XIntOrString = true
		s.AnyOf = []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}
	default:
		return s, fmt.Errorf("declare unsupported %s.%s: unknown kind %q", f.Parent, f.Name, f.Kind)
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }
