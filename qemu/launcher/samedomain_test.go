package launcher

import (
	"testing"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

func TestSameDomainIgnoresStartPaused(t *testing.T) {
	base := &pb.DomainSpec{Name: "ns_vm", MemoryMib: 128}
	paused := &pb.DomainSpec{Name: "ns_vm", MemoryMib: 128, StartPaused: true}
	bigger := &pb.DomainSpec{Name: "ns_vm", MemoryMib: 256, StartPaused: true}
	if !sameDomain(paused, base) || !sameDomain(base, paused) {
		t.Error("start_paused alone made the domains differ")
	}
	if sameDomain(paused, bigger) || sameDomain(base, bigger) {
		t.Error("different memory reported as the same domain")
	}
	if paused.GetStartPaused() != true || base.GetStartPaused() {
		t.Error("sameDomain changed its arguments")
	}
}
