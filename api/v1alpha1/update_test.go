package v1alpha1_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSpecUpdates checks the VMI spec's immutability: only spec.paused and hotpluggable volumes
// (with their disks) may change after creation.
func TestSpecUpdates(t *testing.T) {
	hotplugPVC := func(hot bool) func(t *testing.T, o *unstructured.Unstructured) {
		return func(t *testing.T, o *unstructured.Unstructured) {
			s := at(t, o, "spec")
			s["volumes"] = append(s["volumes"].([]any), map[string]any{
				"name": "data", "persistentVolumeClaim": map[string]any{"claimName": "data", "hotpluggable": hot},
			})
			d := at(t, o, "spec.domain.devices")
			d["disks"] = append(d["disks"].([]any), map[string]any{"name": "data", "disk": map[string]any{"bus": "scsi"}})
		}
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, o *unstructured.Unstructured)
		field  string // "" = the update is allowed
	}{
		{"pause", set("spec", "paused", true), ""},
		{"hotplug a hotpluggable PVC", hotplugPVC(true), ""},
		{"add a plain PVC", hotplugPVC(false), "spec.volumes"},
		{"change cpu cores", set("spec.domain.cpu", "cores", int64(2)), "spec.domain"},
		{"add a cpu model", set("spec.domain.cpu", "model", "Haswell"), "spec.domain"},
		{"change guest memory", set("spec.domain.memory", "guest", "256Mi"), "spec.domain"},
		{"add firmware", set("spec.domain", "firmware", map[string]any{"serial": "s1"}), "spec.domain"},
		{"change a disk bus", set("spec.domain.devices.disks[0].disk", "bus", "sata"), "spec.domain.devices.disks"},
		{"change a volume", set("spec.volumes[0].containerDisk", "image", "example.org/other:1"), "spec.volumes"},
		{"change a port", set("spec.domain.devices.interfaces[0].ports[0]", "port", int64(8080)), "spec.domain.devices"},
		{"add rng", set("spec.domain.devices", "rng", map[string]any{}), "spec.domain.devices"},
		{"change the network", set("spec.networks[0].pod", "vmNetworkCIDR", "10.1.0.0/24"), "spec.networks"},
		{"add a nodeSelector", set("spec", "nodeSelector", map[string]any{"zone": "a"}), "spec"},
		{"change the grace period", set("spec", "terminationGracePeriodSeconds", int64(5)), "spec"},
	}
	env := apiServer(t)
	ctx := testContext(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := validVMI(fmt.Sprintf("update-%d", i))
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.mutate(t, o)
			err := env.Client.Update(ctx, o, client.FieldValidation(metav1.FieldValidationStrict))
			if tc.field == "" {
				if err != nil {
					t.Fatalf("update rejected: %v", err)
				}
				return
			}
			wantRejected(t, err, invalid, badValue, tc.field)
		})
	}
}

// TestHotplugRemoval checks that a hotplugged volume and its disk can be removed again, and a
// boot volume cannot.
func TestHotplugRemoval(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	o := validVMI("hotplug-removal")
	at(t, o, "spec")["volumes"] = append(at(t, o, "spec")["volumes"].([]any), map[string]any{
		"name": "data", "dataVolume": map[string]any{"name": "data", "hotpluggable": true},
	})
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatalf("create: %v", err)
	}
	s := at(t, o, "spec")
	s["volumes"] = s["volumes"].([]any)[:1]
	// Update replaces o.Object with the server's answer: look paths up again afterwards.
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("remove hotpluggable volume: %v", err)
	}
	at(t, o, "spec")["volumes"] = []any{}
	at(t, o, "spec.domain.devices")["disks"] = []any{}
	wantRejected(t, env.Client.Update(ctx, o), invalid, badValue, "spec.volumes")
}

// TestLargestVMIFitsCELBudget creates and updates a VMI with every list at its maxItems, so the
// CEL rules run at their worst case against the API server's per-request cost budget.
func TestLargestVMIFitsCELBudget(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	o := validVMI("largest")
	var disks, vols, ports []any
	for i := range 64 {
		name := fmt.Sprintf("disk-%d", i)
		disks = append(disks, map[string]any{"name": name, "bootOrder": int64(i + 1), "disk": map[string]any{"bus": "virtio"}})
		vols = append(vols, map[string]any{"name": name, "persistentVolumeClaim": map[string]any{"claimName": name, "hotpluggable": i%2 == 0}})
		ports = append(ports, map[string]any{"name": fmt.Sprintf("p%d", i), "port": int64(1000 + i)})
	}
	at(t, o, "spec.domain.devices")["disks"] = disks
	at(t, o, "spec")["volumes"] = vols
	at(t, o, "spec.domain.devices.interfaces[0]")["ports"] = ports
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatalf("create: %v", err)
	}
	// Unplug a hotpluggable volume and its disk: every transition rule runs.
	at(t, o, "spec")["volumes"] = at(t, o, "spec")["volumes"].([]any)[1:]
	at(t, o, "spec.domain.devices")["disks"] = at(t, o, "spec.domain.devices")["disks"].([]any)[1:]
	at(t, o, "spec")["paused"] = true
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("update: %v", err)
	}
}
