package translate

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/qemu"
)

// TestTranslateHotplug checks the boot domain of VMIs with CPU and memory hotplug: the maxima
// translate to -smp maxcpus and a virtio-mem region, the domain keeps its boot sockets and
// memory (from the status) whatever the spec asks now, and VMIs without maxima get neither.
func TestTranslateHotplug(t *testing.T) {
	hot := func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 1, MaxSockets: 4}
		v.Spec.Domain.Memory = &vmletv1.Memory{Guest: qty("128Mi"), MaxGuest: qty("512Mi")}
	}
	tests := []struct {
		name    string
		mutate  func(*vmletv1.VirtualMachineInstance)
		want    func(*qemu.Spec)
		request int // MemoryRequestMiB
	}{
		{name: "no maxima: no hotplug, sockets as the spec says", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Spec.Domain.CPU = &vmletv1.CPU{Sockets: 2}
			v.Status.Launcher = &vmletv1.LauncherStatus{SocketsAtBoot: 1} // not read without maxSockets
		}, want: func(s *qemu.Spec) { s.CPU = qemu.CPU{Sockets: 2} }},
		{name: "maxSockets and maxGuest", mutate: hot, want: func(s *qemu.Spec) {
			s.CPU = qemu.CPU{Sockets: 1, MaxSockets: 4}
			s.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: 512, BlockMiB: 2}
		}},
		{name: "a running vmi keeps its boot topology when the spec changes", mutate: func(v *vmletv1.VirtualMachineInstance) {
			hot(v)
			v.Spec.Domain.CPU.Sockets = 3
			v.Spec.Domain.Memory.Guest = qty("384Mi")
			v.Status.Launcher = &vmletv1.LauncherStatus{SocketsAtBoot: 1}
			v.Status.Memory = &vmletv1.MemoryStatus{GuestAtBoot: qty("128Mi")}
		}, want: func(s *qemu.Spec) {
			s.CPU = qemu.CPU{Sockets: 1, MaxSockets: 4}
			s.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: 512, BlockMiB: 2}
		}, request: 256},
		{name: "before the status knows the boot values the spec's are the boot ones", mutate: func(v *vmletv1.VirtualMachineInstance) {
			hot(v)
			v.Spec.Domain.CPU.Sockets = 2
			v.Spec.Domain.Memory.Guest = qty("256Mi")
		}, want: func(s *qemu.Spec) {
			s.MemoryMiB = 256
			s.CPU = qemu.CPU{Sockets: 2, MaxSockets: 4}
			s.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: 512, BlockMiB: 2}
		}},
		{name: "the region is whole blocks", mutate: func(v *vmletv1.VirtualMachineInstance) {
			hot(v)
			v.Spec.Domain.Memory.MaxGuest = qty("515Mi")
			v.Spec.Domain.Memory.Guest = qty("129Mi") // 1 MiB over boot: one 2 MiB block
			v.Status.Memory = &vmletv1.MemoryStatus{GuestAtBoot: qty("128Mi")}
		}, want: func(s *qemu.Spec) {
			s.CPU = qemu.CPU{Sockets: 1, MaxSockets: 4}
			s.MemoryHotplug = &qemu.MemoryHotplug{MaxMiB: 514, BlockMiB: 2}
		}, request: 2},
		{name: "maxGuest equal to guest leaves no region", mutate: func(v *vmletv1.VirtualMachineInstance) {
			hot(v)
			v.Spec.Domain.Memory.MaxGuest = qty("128Mi")
		}, want: func(s *qemu.Spec) { s.CPU = qemu.CPU{Sockets: 1, MaxSockets: 4} }},
		{name: "a guest-at-boot status without maxGuest is not read", mutate: func(v *vmletv1.VirtualMachineInstance) {
			v.Status.Memory = &vmletv1.MemoryStatus{GuestAtBoot: qty("64Mi")}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := baseVMI()
			if tt.mutate != nil {
				tt.mutate(vmi)
			}
			want := wantSpec()
			if tt.want != nil {
				tt.want(want)
			}
			got, err := Translate(vmi, testEnv(), Referenced{})
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			if diff := cmp.Diff(want, got.Spec, cmpOpts); diff != "" {
				t.Errorf("domain spec (-want +got):\n%s", diff)
			}
			if r := MemoryRequestMiB(vmi, got.Spec.MemoryHotplug, got.Spec.MemoryMiB); r != tt.request {
				t.Errorf("MemoryRequestMiB = %d, want %d", r, tt.request)
			}
		})
	}
}
