package controllers

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
)

type fakeImages map[string][2]string

func (f fakeImages) KernelBoot(image, _, _ string) (string, string, error) {
	p, ok := f[image]
	if !ok {
		return "", "", errors.New("image not found")
	}
	return p[0], p[1], nil
}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

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

func TestDomainSpec(t *testing.T) {
	env := NodeEnv{RunDir: "/run/vmlet/x", Images: fakeImages{"guest:1": {"/img/vmlinuz", "/img/initramfs.gz"}}, TCGCacheMiB: 32}
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		check   func(t *testing.T, got string)
		wantErr error // nil: success; ErrUnsupported or errInvalid
		field   string
	}{
		{name: "kernel boot defaults", check: func(t *testing.T, got string) {
			for _, want := range []string{"Name:default_demo", "MemoryMiB:128", "Kernel:/img/vmlinuz", "Initrd:/img/initramfs.gz", "Cmdline:console=ttyS0", "StartPaused:false", "TCGCacheMiB:32", "/run/vmlet/x/serial.log"} {
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
		{name: "unknown image", mutate: func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Firmware.KernelBoot.Container.Image = "nope:1" },
			wantErr: errInvalid, field: "spec.domain.firmware.kernelBoot.container.image"},
		{name: "kernel args with a newline", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.Firmware.KernelBoot.KernelArgs = "console=ttyS0\n-device evil"
		}, wantErr: errInvalid, field: "spec"},
		{name: "volumes not yet", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Volumes = []vmletv1.Volume{{Name: "d", VolumeSource: vmletv1.VolumeSource{EmptyDisk: &vmletv1.EmptyDiskSource{}}}}
		}, wantErr: ErrUnsupported, field: "spec.volumes[0]"},
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
			spec, err := DomainSpec(vmi, env)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("DomainSpec: %v", err)
				}
				tt.check(t, strings.ReplaceAll(fmtSpec(spec), "\n", " "))
				return
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *SpecError", err)
			}
			if se.Field != tt.field {
				t.Errorf("field = %q, want %q (%v)", se.Field, tt.field, err)
			}
			if errors.Is(tt.wantErr, ErrUnsupported) && !errors.Is(err, ErrUnsupported) {
				t.Errorf("err = %v, want ErrUnsupported", err)
			}
			if errors.Is(tt.wantErr, errInvalid) && errors.Is(err, ErrUnsupported) {
				t.Errorf("err = %v is unsupported, want invalid", err)
			}
		})
	}
}

var errInvalid = errors.New("invalid (test marker)")

func mustContain(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("spec lacks %q: %s", want, got)
	}
}
