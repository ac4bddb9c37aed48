package launcherpod_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

const mi = 1 << 20

// TestResources is the memory and CPU math: guest + overhead for memory (requests = limits),
// CPU requests from the VMI or 100m per vCPU.
func TestResources(t *testing.T) {
	q := resource.MustParse
	// The overhead of a 1-vCPU guest without TCG cache, from the constants (the formula itself
	// is checked against QEMU in overhead_test.go).
	// The default display's video RAM included.
	base := int64(launcherpod.LauncherOverhead + launcherpod.QEMUBaseOverhead + launcherpod.QEMUPerVCPU + launcherpod.VideoOverhead)
	no := false
	cases := []struct {
		name             string
		spec             vmletv1.DomainSpec
		tcg              int
		memReq, memLimit int64
		cpuReq, cpuLimit string
	}{
		{
			name:   "memory.guest, no cpu",
			spec:   vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptrQ(q("512Mi"))}},
			memReq: 512*mi + base + 512*mi/512, memLimit: 512*mi + base + 512*mi/512, cpuReq: "100m",
		},
		{
			name:   "requests.memory, TCG cache, 2x2x2 vCPUs",
			spec:   vmletv1.DomainSpec{Resources: vmletv1.ResourceRequirements{Requests: vmletv1.ResourceList{"memory": q("1Gi")}}, CPU: &vmletv1.CPU{Sockets: 2, Cores: 2, Threads: 2}},
			tcg:    32,
			memReq: 1024*mi + base + 7*launcherpod.QEMUPerVCPU + 2*mi + 32*mi, memLimit: 1024*mi + base + 7*launcherpod.QEMUPerVCPU + 2*mi + 32*mi,
			cpuReq: "800m",
		},
		{
			name:   "guest wins over requests; decimal memory rounds up to MiB",
			spec:   vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptrQ(q("100M"))}, Resources: vmletv1.ResourceRequirements{Requests: vmletv1.ResourceList{"memory": q("2Gi")}}},
			memReq: 96*mi + base + 96*mi/512, memLimit: 96*mi + base + 96*mi/512, cpuReq: "100m",
		},
		{
			name:   "limits.memory only, cpu request and limit, overcommit overhead",
			spec:   vmletv1.DomainSpec{Resources: vmletv1.ResourceRequirements{Limits: vmletv1.ResourceList{"memory": q("256Mi"), "cpu": q("2")}, Requests: vmletv1.ResourceList{"cpu": q("500m")}, OvercommitGuestOverhead: true}},
			memReq: 256 * mi, memLimit: 256*mi + base + 256*mi/512, cpuReq: "500m", cpuLimit: "2",
		},
		{
			name:   "cpu request above the limit is lowered to it",
			spec:   vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptrQ(q("128Mi"))}, Resources: vmletv1.ResourceRequirements{Limits: vmletv1.ResourceList{"cpu": q("1")}, Requests: vmletv1.ResourceList{"cpu": q("3")}}},
			memReq: 128*mi + base + 128*mi/512, memLimit: 128*mi + base + 128*mi/512, cpuReq: "1", cpuLimit: "1",
		},
		{
			name:   "no display: no video RAM",
			spec:   vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptrQ(q("512Mi"))}, Devices: vmletv1.Devices{AutoattachGraphicsDevice: &no}},
			memReq: 512*mi + base - launcherpod.VideoOverhead + 512*mi/512, memLimit: 512*mi + base - launcherpod.VideoOverhead + 512*mi/512, cpuReq: "100m",
		},
		{
			name:   "no memory at all: the translation's default 128Mi",
			spec:   vmletv1.DomainSpec{},
			memReq: 128*mi + base + 128*mi/512, memLimit: 128*mi + base + 128*mi/512, cpuReq: "100m",
		},
		{
			name:   "512 vCPUs, 16Ti guest (the maximum)",
			spec:   vmletv1.DomainSpec{Memory: &vmletv1.Memory{Guest: ptrQ(q("16Ti"))}, CPU: &vmletv1.CPU{Sockets: 8, Cores: 64}},
			memReq: 16<<40 + base + 511*launcherpod.QEMUPerVCPU + 16<<40/512, memLimit: 16<<40 + base + 511*launcherpod.QEMUPerVCPU + 16<<40/512,
			cpuReq: "51200m",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vmi := testVMI(func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain = c.spec })
			res, err := launcherpod.Resources(vmi, c.tcg)
			if err != nil {
				t.Fatal(err)
			}
			c.memReq, c.memLimit = roundMiB(c.memReq), roundMiB(c.memLimit)
			if got := res.Requests.Memory().Value(); got != c.memReq {
				t.Errorf("memory request %d MiB, want %d MiB", got/mi, c.memReq/mi)
			}
			if got := res.Limits.Memory().Value(); got != c.memLimit {
				t.Errorf("memory limit %d MiB, want %d MiB", got/mi, c.memLimit/mi)
			}
			if got := res.Requests.Cpu(); got.Cmp(q(c.cpuReq)) != 0 {
				t.Errorf("cpu request %s, want %s", got, c.cpuReq)
			}
			got, ok := res.Limits[corev1.ResourceCPU]
			if (c.cpuLimit == "") == ok || (ok && got.Cmp(q(c.cpuLimit)) != 0) {
				t.Errorf("cpu limit %v (set %v), want %q", got.String(), ok, c.cpuLimit)
			}
		})
	}
}

// TestResourcesRefused: sizes that no node can hold or that would overflow are errors, not
// panics or wrapped-around quantities.
func TestResourcesRefused(t *testing.T) {
	for _, s := range []string{"16Ti+1", "8Ei", "1e30", "512Ki", "1"} {
		q, err := resource.ParseQuantity(s)
		if err != nil {
			q = resource.MustParse("16385Gi")
		}
		vmi := testVMI(func(v *vmletv1.VirtualMachineInstance) { v.Spec.Domain.Memory.Guest = &q })
		if _, err := launcherpod.Resources(vmi, 32); err == nil {
			t.Errorf("guest memory %s: no error", q.String())
		}
	}
	// A huge CPU request is copied, not computed with: no overflow.
	vmi := testVMI(func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Domain.Resources.Requests = vmletv1.ResourceList{"cpu": resource.MustParse("1e18")}
	})
	res, err := launcherpod.Resources(vmi, 0)
	if err != nil || res.Requests.Cpu().String() != "1e18" {
		t.Errorf("cpu 1e18: %v %v", res.Requests.Cpu(), err)
	}
}

func roundMiB(b int64) int64 { return (b + mi - 1) / mi * mi }

func ptrQ(q resource.Quantity) *resource.Quantity { return &q }
