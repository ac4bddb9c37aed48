package translate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        *errView // nil means accepted
	}{
		{"none", nil, nil},
		{"unrelated", map[string]string{"example.com/owner": "me", "kubectl.kubernetes.io/last-applied-configuration": "{}"}, nil},
		// An SMBIOS value alone does nothing in KubeVirt either: only its sidecar reads it.
		{"smbios-alone", map[string]string{"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward"}, nil},
		{"hook-sidecar", map[string]string{
			"hooks.kubevirt.io/hookSidecars":              `[{"args": ["--version", "v1alpha2"], "image": "registry:5000/kubevirt/example-hook-sidecar:devel"}]`,
			"smbios.vm.kubevirt.io/baseBoardManufacturer": "Radical Edward",
		}, &errView{"metadata.annotations[hooks.kubevirt.io/hookSidecars]",
			"hook sidecars (vmlet has no libvirt domain XML to hook) are not supported", "Unsupported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, viewErr(t, checkAnnotations(tt.annotations))); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
