package controllers

import (
	"errors"
	"testing"
)

func TestCheckAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		field       string // "" means accepted
	}{
		{"none", nil, ""},
		{"unrelated", map[string]string{"example.com/owner": "me", "kubectl.kubernetes.io/last-applied-configuration": "{}"}, ""},
		// An SMBIOS value alone does nothing in KubeVirt either: only its sidecar reads it.
		{"smbios-alone", map[string]string{"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward"}, ""},
		{"hook-sidecar", map[string]string{
			"hooks.kubevirt.io/hookSidecars":              `[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}]`,
			"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward",
		}, "metadata.annotations[hooks.kubevirt.io/hookSidecars]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkAnnotations(tt.annotations)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			se, ok := errors.AsType[*SpecError](err)
			if !ok || se.Field != tt.field || !errors.Is(err, ErrUnsupported) {
				t.Fatalf("err = %v, want an unsupported SpecError for %s", err, tt.field)
			}
		})
	}
}
