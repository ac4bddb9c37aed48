package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

const testVolumeDir = "/vols/u1"

func baseVMI() *vmletv1.VirtualMachineInstance {
	return &vmletv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "demo", UID: "6f1c3c1e-7a55-4a4e-9d4f-2d1c9b3c0a11"},
		Spec: vmletv1.VirtualMachineInstanceSpec{Domain: vmletv1.DomainSpec{
			Memory: &vmletv1.Memory{Guest: qty("128Mi")},
			Firmware: &vmletv1.Firmware{KernelBoot: &vmletv1.KernelBoot{
				KernelArgs: "console=ttyS0",
				Container:  &vmletv1.KernelBootContainer{Image: "guest:1", KernelPath: "/vmlinuz", InitrdPath: "/initramfs.gz"},
			}},
		}},
	}
}

func testEnv() NodeEnv {
	return NodeEnv{RunDir: "/run/vmlet/x", VolumeDir: testVolumeDir, TCGCacheMiB: 32}
}

func TestDomainSpec(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		check   func(t *testing.T, got string)
		wantErr error // nil: success; ErrUnsupported or errInvalid
		field   string
	}{
		{name: "kernel boot defaults", check: func(t *testing.T, got string) {
			for _, want := range []string{"Name:default_demo", "MemoryMiB:128", "Kernel:/vols/u1/boot/kernel", "Initrd:/vols/u1/boot/initrd",
				"Cmdline:console=ttyS0", "StartPaused:false", "TCGCacheMiB:32", "SCSI:true", "/run/vmlet/x/serial.log"} {
				if !strings.Contains(got, want) {
					t.Errorf("spec lacks %q: %s", want, got)
				}
			}
		}},
		{name: "paused is not part of the domain", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Paused = true },
			check: func(t *testing.T, got string) { mustContain(t, got, "StartPaused:false") }},
		{name: "memory from requests", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Memory = nil
			v.Spec.Domain.Resources.Requests = vmletv1.ResourceList{vmletv1.ResourceMemory: *qty("1Gi")}
		}, check: func(t *testing.T, got string) { mustContain(t, got, "MemoryMiB:1024") }},
		{name: "memory in decimal units rounds up", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = qty("1024M") },
			check: func(t *testing.T, got string) { mustContain(t, got, "MemoryMiB:977") }},
		{name: "cpu topology and model", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 1, Cores: 2, Threads: 1, Model: "qemu64"}
		}, check: func(t *testing.T, got string) { mustContain(t, got, "CPU:{Model:qemu64 Sockets:1 Cores:2 Threads:1}") }},
		{name: "rng", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Devices.Rng = &vmletv1.Rng{} },
			check: func(t *testing.T, got string) { mustContain(t, got, "RNG:true") }},
		{name: "no serial console", mutate: func(v *vmletv1.VirtualMachineInstance) {
			f := false
			v.Spec.Domain.Devices.AutoattachSerialConsole = &f
		}, check: func(t *testing.T, got string) { mustContain(t, got, "Serial:<nil>") }},
		{name: "tiny memory", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = qty("1k") },
			wantErr: errInvalid, field: "spec.domain.memory.guest"},
		{name: "kernel boot without a kernel path", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container.KernelPath = "" },
			wantErr: errInvalid, field: "spec.domain.firmware.kernelBoot.container.kernelPath"},
		{name: "kernel boot without a container", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container = nil },
			wantErr: errInvalid, field: "spec.domain.firmware.kernelBoot.container"},
		{name: "invalid kernel image reference", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container.Image = "Bad Ref" },
			wantErr: errInvalid, field: "spec.domain.firmware.kernelBoot"},
		{name: "kernel args with a newline", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.KernelArgs = "console=ttyS0\n-device evil"
		}, wantErr: errInvalid, field: "spec.domain.firmware.kernelBoot.kernelArgs"},
		{name: "interface without its network", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default"}}
		}, wantErr: errInvalid, field: "spec.domain.devices.interfaces[0].name"},
		{name: "efi not yet", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.Bootloader = &vmletv1.Bootloader{EFI: &vmletv1.EFI{}}
		}, wantErr: ErrUnsupported, field: "spec.domain.firmware.bootloader.efi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			dom, err := DomainSpec(vmi, testEnv(), Referenced{})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("DomainSpec: %v", err)
				}
				tt.check(t, strings.ReplaceAll(fmtSpec(dom.Spec), "\n", " "))
				return
			}
			checkSpecError(t, err, tt.wantErr, tt.field)
		})
	}
}

// checkSpecError checks err is a *SpecError about field, unsupported or invalid as wanted.
func checkSpecError(t *testing.T, err, want error, field string) {
	t.Helper()
	var se *SpecError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *SpecError", err)
	}
	if se.Field != field {
		t.Errorf("field = %q, want %q (%v)", se.Field, field, err)
	}
	if errors.Is(want, ErrUnsupported) && !errors.Is(err, ErrUnsupported) {
		t.Errorf("err = %v, want ErrUnsupported", err)
	}
	if errors.Is(want, errInvalid) && errors.Is(err, ErrUnsupported) {
		t.Errorf("err = %v is unsupported, want invalid", err)
	}
}

var errInvalid = errors.New("invalid (test marker)")

func mustContain(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("spec lacks %q: %s", want, got)
	}
}
