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

// TestSameDomainBootIndex: a NIC's boot index is part of the domain (a spec that moves the
// boot order is another domain), and the same index on both sides is the same domain.
func TestSameDomainBootIndex(t *testing.T) {
	nic := func(boot int32) *pb.DomainSpec {
		return &pb.DomainSpec{Name: "ns_vm", MemoryMib: 128, Nics: []*pb.NIC{{Id: "net-default", Mac: "52:54:00:00:00:01", TapName: "tap0", BootIndex: boot}}}
	}
	if !sameDomain(nic(1), nic(1)) {
		t.Error("the same NIC boot index reported as different domains")
	}
	if sameDomain(nic(1), nic(0)) || sameDomain(nic(0), nic(2)) {
		t.Error("a NIC boot index change reported as the same domain")
	}
}
