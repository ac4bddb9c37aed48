package launcherpod_test

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/controllers/launcherpod"
)

// TestDeviceLimits: the launcher container asks for kvm unless emulation is allowed and for tun
// when the VMI has an interface (the default pod interface counts), never for vhost-net; a
// KVM-only pod has no KVM node label in its selector (the resource says it, so the scheduler
// reports Insufficient devices.vmlet.dev/kvm).
func TestDeviceLimits(t *testing.T) {
	noNIC := func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.AutoattachPodInterface = ptr.To(false)
	}
	masq := func(v *vmletv1.VirtualMachineInstance) {
		v.Spec.Domain.Devices.Interfaces = []vmletv1.Interface{{Name: "default",
			InterfaceBindingMethod: vmletv1.InterfaceBindingMethod{Masquerade: &vmletv1.InterfaceMasquerade{}}}}
		v.Spec.Networks = []vmletv1.Network{{Name: "default", NetworkSource: vmletv1.NetworkSource{Pod: &vmletv1.PodNetwork{}}}}
	}
	for _, c := range []struct {
		name      string
		vmi       func(*vmletv1.VirtualMachineInstance)
		emulation bool
		want      []string
	}{
		{"default interface, emulation", nil, true, []string{launcherpod.ResourceTun}},
		{"default interface, kvm only", nil, false, []string{launcherpod.ResourceKVM, launcherpod.ResourceTun}},
		{"masquerade, emulation", masq, true, []string{launcherpod.ResourceTun}},
		{"no interface, emulation", noNIC, true, nil},
		{"no interface, kvm only", noNIC, false, []string{launcherpod.ResourceKVM}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod, err := launcherpod.Build(testVMI(c.vmi), opts(func(o *launcherpod.Options) { o.AllowEmulation = c.emulation }), nil)
			if err != nil {
				t.Fatal(err)
			}
			res := pod.Spec.Containers[0].Resources
			var got []string
			for n, q := range res.Limits {
				if n == corev1.ResourceCPU || n == corev1.ResourceMemory {
					continue
				}
				if q.Value() != 1 {
					t.Errorf("%s limit %s, want 1", n, q.String())
				}
				if _, ok := res.Requests[n]; ok {
					t.Errorf("%s in requests: limits only (the API server copies them)", n)
				}
				got = append(got, string(n))
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("device limits %v, want %v", got, c.want)
			}
			if want := map[string]string{launcherpod.NodeLabelSchedulable: "true"}; !maps.Equal(pod.Spec.NodeSelector, want) {
				t.Errorf("nodeSelector %v, want %v", pod.Spec.NodeSelector, want)
			}
			cr := launcherpod.ComputeResources(res)
			if len(cr.Limits) != 1 || len(cr.Requests) != 2 || cr.Limits.Memory().Cmp(*res.Limits.Memory()) != 0 {
				t.Errorf("ComputeResources(%v) = %v, want CPU and memory only", res, cr)
			}
		})
	}
}
