package controllers_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/test/prereq"
)

// BenchmarkNICHotplug measures declarative NIC hotplug on one running VMI through the real API
// server, agent, launcher, QEMU and guest: from the spec patch that adds a multus network and
// its bridge interface to the hotplugged interface's address in status.interfaces (pod
// interface + binding + DHCP server + QMP device_add + the guest's udhcpc), and from the patch
// setting it absent to its entry gone from the status (device_del released by the guest,
// host objects removed). Each iteration plugs and unplugs once.
func BenchmarkNICHotplug(b *testing.B) {
	prereq.Root(b)
	prereq.QEMU(b)
	a := startAgent(b, agentOptions{})
	defer a.stop(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	vmi := masqueradeVMI("bench-nic-hotplug")
	w, err := wc.Watch(ctx, &vmletv1.VirtualMachineInstanceList{}, client.InNamespace("default"))
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	if err := env.Client.Create(ctx, vmi); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := env.Client.Delete(ctx, vmi); err != nil {
			b.Error(err)
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(vmi), &vmletv1.VirtualMachineInstance{})) {
			select {
			case <-tick.C:
			case <-ctx.Done():
				b.Errorf("%s not deleted: %v", vmi.Name, ctx.Err())
				return
			}
		}
	}()
	waitAll(ctx, b, w, vmi.Name, func(v *vmletv1.VirtualMachineInstance) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, vmletv1.VirtualMachineInstanceAgentConnected) &&
			len(v.Status.Interfaces) == 1 && v.Status.Interfaces[0].IP != ""
	})
	ifc, nw := secondaryNIC("blue", "vmlet-node")
	key := client.ObjectKeyFromObject(vmi)
	var plug, unplug []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		patchB(ctx, b, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces = append(s.Domain.Devices.Interfaces[:1], ifc)
			s.Networks = append(s.Networks[:1], nw)
		})
		waitAll(ctx, b, w, vmi.Name, func(v *vmletv1.VirtualMachineInstance) bool {
			s, ok := statusInterface(v, "blue")
			return ok && s.IP != ""
		})
		plug = append(plug, time.Since(t0))
		t0 = time.Now()
		patchB(ctx, b, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces[1].State = vmletv1.InterfaceStateAbsent
		})
		waitAll(ctx, b, w, vmi.Name, func(v *vmletv1.VirtualMachineInstance) bool {
			_, ok := statusInterface(v, "blue")
			return !ok
		})
		unplug = append(unplug, time.Since(t0))
		patchB(ctx, b, key, func(s *vmletv1.VirtualMachineInstanceSpec) {
			s.Domain.Devices.Interfaces, s.Networks = s.Domain.Devices.Interfaces[:1], s.Networks[:1]
		})
	}
	b.StopTimer()
	report(b, "patch-to-address", plug)
	report(b, "absent-to-gone", unplug)
}

func patchB(ctx context.Context, b *testing.B, key client.ObjectKey, change func(*vmletv1.VirtualMachineInstanceSpec)) {
	b.Helper()
	v := &vmletv1.VirtualMachineInstance{}
	if err := env.Client.Get(ctx, key, v); err != nil {
		b.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	change(&v.Spec)
	if err := env.Client.Patch(ctx, v, patch); err != nil {
		b.Fatal(err)
	}
}
