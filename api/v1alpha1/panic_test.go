package v1alpha1_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

// TestPanicDevicesAccepted: KubeVirt's panicDevices with the models vmlet provides (isa, also
// as the missing model, and pvpanic) are accepted with strict field validation and read back
// as written; the refused ones are in invalidCases.
func TestPanicDevicesAccepted(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	for name, devs := range map[string][]any{
		"panic-default": {map[string]any{}},
		"panic-isa":     {map[string]any{"model": "isa"}},
		"panic-both":    {map[string]any{"model": "pvpanic"}, map[string]any{"model": "isa"}},
	} {
		t.Run(name, func(t *testing.T) {
			o := validVMI(name)
			at(t, o, "spec.domain.devices")["panicDevices"] = devs
			if err := env.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
				t.Fatalf("create: %v", err)
			}
			v := &vmletv1.VirtualMachineInstance{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), v); err != nil {
				t.Fatal(err)
			}
			got := v.Spec.Domain.Devices.PanicDevices
			if len(got) != len(devs) {
				t.Fatalf("panicDevices %+v, want %d", got, len(devs))
			}
			for i, d := range devs {
				want, _ := d.(map[string]any)["model"].(string)
				if m := got[i].Model; (m == nil) != (want == "") || m != nil && string(*m) != want {
					t.Errorf("panicDevices[%d].model %v, want %q", i, m, want)
				}
			}
		})
	}
}
