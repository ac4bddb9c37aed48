package translate

import (
	"errors"
	"slices"
	"testing"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// TestPanicDevices: KubeVirt's panic device models map to the driver's as libvirt maps them on
// x86_64 (a missing model is isa); hyperv fails Unsupported, anything else is invalid.
func TestPanicDevices(t *testing.T) {
	model := func(m vmletv1.PanicDeviceModel) *vmletv1.PanicDeviceModel { return &m }
	tests := []struct {
		name        string
		devs        []vmletv1.PanicDevice
		want        []qemu.PanicModel
		field       string // "" = translates
		unsupported bool
	}{
		{name: "none"},
		{name: "missing model is isa", devs: []vmletv1.PanicDevice{{}}, want: []qemu.PanicModel{qemu.PanicISA}},
		{name: "isa", devs: []vmletv1.PanicDevice{{Model: model("isa")}}, want: []qemu.PanicModel{qemu.PanicISA}},
		{name: "pvpanic is pvpanic-pci", devs: []vmletv1.PanicDevice{{Model: model("pvpanic")}}, want: []qemu.PanicModel{qemu.PanicPCI}},
		{name: "both, in order", devs: []vmletv1.PanicDevice{{Model: model("pvpanic")}, {}}, want: []qemu.PanicModel{qemu.PanicPCI, qemu.PanicISA}},
		{name: "hyperv", devs: []vmletv1.PanicDevice{{Model: model("hyperv")}}, field: "spec.domain.devices.panicDevices[0].model", unsupported: true},
		{name: "unknown", devs: []vmletv1.PanicDevice{{}, {Model: model("pvpanic,id=x")}}, field: "spec.domain.devices.panicDevices[1].model"},
		{name: "isa twice", devs: []vmletv1.PanicDevice{{Model: model("isa")}, {}}, field: "spec.domain.devices.panicDevices[1].model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			vmi.Spec.Domain.Devices.PanicDevices = tt.devs
			d, err := Translate(vmi, testEnv(), Referenced{})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Translate: %v", err)
				}
				if !slices.Equal(d.Spec.Panic, tt.want) {
					t.Errorf("panic devices %q, want %q", d.Spec.Panic, tt.want)
				}
				return
			}
			se, ok := errors.AsType[*SpecError](err)
			if !ok || se.Field != tt.field || errors.Is(err, ErrUnsupported) != tt.unsupported {
				t.Fatalf("error %v, want a SpecError on %s (unsupported %v)", err, tt.field, tt.unsupported)
			}
		})
	}
}
