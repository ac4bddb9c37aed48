package v1alpha1_test

import (
	"fmt"
	"reflect"
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
	hotplugNIC := func(ifc map[string]any) func(t *testing.T, o *unstructured.Unstructured) {
		return func(t *testing.T, o *unstructured.Unstructured) { addMultus(t, o, "blue", ifc) }
	}
	tests := []struct {
		name   string
		mutate func(t *testing.T, o *unstructured.Unstructured)
		field  string // "" = the update is allowed
	}{
		{"hotplug a bridge interface on a multus network", hotplugNIC(map[string]any{"name": "blue", "bridge": map[string]any{}, "macAddress": "02:00:00:00:00:01"}), ""},
		{"hotplug a masquerade interface", hotplugNIC(map[string]any{"name": "blue", "masquerade": map[string]any{}}), "spec.domain.devices.interfaces"},
		{"hotplug an interface with a bad MAC", hotplugNIC(map[string]any{"name": "blue", "bridge": map[string]any{}, "macAddress": "02:00:00:00:00"}), "spec.domain.devices.interfaces[1].macAddress"},
		{"hotplug an interface without its network", func(t *testing.T, o *unstructured.Unstructured) {
			d := at(t, o, "spec.domain.devices")
			d["interfaces"] = append(d["interfaces"].([]any), map[string]any{"name": "blue", "bridge": map[string]any{}})
		}, "spec.domain.devices.interfaces"},
		{"hotplug a second pod network", func(t *testing.T, o *unstructured.Unstructured) {
			addMultus(t, o, "blue", map[string]any{"name": "blue", "bridge": map[string]any{}})
			n := at(t, o, "spec.networks[1]")
			delete(n, "multus")
			n["pod"] = map[string]any{}
		}, "spec.networks"},
		{"hotplug an interface of a duplicate name", func(t *testing.T, o *unstructured.Unstructured) {
			addMultus(t, o, "blue", map[string]any{"name": "default", "bridge": map[string]any{}})
		}, "spec.domain.devices.interfaces"}, // and a Duplicate cause on interfaces[1]
		{"unplug the pod network's interface", set("spec.domain.devices.interfaces[0]", "state", "absent"), "spec.domain.devices.interfaces"},
		{"pause", set("spec", "paused", true), ""},
		{"hotplug a hotpluggable PVC", hotplugPVC(true), ""},
		{"add a plain PVC", hotplugPVC(false), "spec.volumes"},
		{"change cpu cores", set("spec.domain.cpu", "cores", int64(2)), "spec.domain"},
		{"add a cpu model", set("spec.domain.cpu", "model", "Haswell"), "spec.domain"},
		{"change guest memory without maxGuest", set("spec.domain.memory", "guest", "256Mi"), "spec.domain.memory.guest"},
		{"change cpu sockets without maxSockets", set("spec.domain.cpu", "sockets", int64(2)), "spec.domain.cpu.sockets"},
		{"add maxSockets", set("spec.domain.cpu", "maxSockets", int64(4)), "spec.domain"},
		{"add maxGuest", set("spec.domain.memory", "maxGuest", "512Mi"), "spec.domain"},
		{"add firmware", set("spec.domain", "firmware", map[string]any{"serial": "s1"}), "spec.domain"},
		{"change a disk bus", set("spec.domain.devices.disks[0].disk", "bus", "sata"), "spec.domain.devices.disks"},
		{"change a volume", set("spec.volumes[0].containerDisk", "image", "example.org/other:1"), "spec.volumes"},
		{"change a port", set("spec.domain.devices.interfaces[0].ports[0]", "port", int64(8080)), "spec.domain.devices.interfaces"},
		{"add rng", set("spec.domain.devices", "rng", map[string]any{}), "spec.domain.devices"},
		{"add a panic device", set("spec.domain.devices", "panicDevices", []any{map[string]any{"model": "pvpanic"}}), "spec.domain.devices"},
		{"change the network", set("spec.networks[0].pod", "vmNetworkCIDR", "10.1.0.0/24"), "spec.networks"},
		{"add a nodeSelector", set("spec", "nodeSelector", map[string]any{"zone": "a"}), "spec"},
		{"add a toleration", set("spec", "tolerations", []any{map[string]any{"key": "dedicated", "operator": "Exists"}}), "spec"},
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

// TestTolerations: KubeVirt's usual tolerations are accepted, kept as written, and a VMI that has
// them can still be paused (the immutability rule compares them, it does not forbid them).
func TestTolerations(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	o := validVMI("tolerations")
	tols := []any{
		map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
		map[string]any{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
		map[string]any{"key": "dedicated", "operator": "Equal", "value": "vms"},
		map[string]any{"operator": "Exists"},
	}
	at(t, o, "spec")["tolerations"] = tols
	if err := env.Client.Create(ctx, o, client.FieldValidation(metav1.FieldValidationStrict)); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := at(t, o, "spec")["tolerations"]; !reflect.DeepEqual(got, tols) {
		t.Errorf("tolerations stored as %v, want %v", got, tols)
	}
	at(t, o, "spec")["paused"] = true
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("pause a VMI with tolerations: %v", err)
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
	var disks, vols, ports, tols []any
	for i := range 64 {
		tols = append(tols, map[string]any{"key": fmt.Sprintf("example.org/taint-%d", i), "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": int64(i)})
		name := fmt.Sprintf("disk-%d", i)
		disks = append(disks, map[string]any{"name": name, "bootOrder": int64(i + 1), "disk": map[string]any{"bus": "virtio"}})
		vols = append(vols, map[string]any{"name": name, "persistentVolumeClaim": map[string]any{"claimName": name, "hotpluggable": i%2 == 0}})
		ports = append(ports, map[string]any{"name": fmt.Sprintf("p%d", i), "port": int64(1000 + i)})
	}
	at(t, o, "spec.domain.devices")["disks"] = disks
	at(t, o, "spec")["volumes"] = vols
	at(t, o, "spec.domain.devices.interfaces[0]")["ports"] = ports
	at(t, o, "spec")["tolerations"] = tols
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

// TestInterfaceHotplugUpdates walks KubeVirt's hotplug flow on a VMI: add a multus network and
// its bridge interface, set the interface to state: absent, drop both; and checks that an
// existing interface changes only to absent and that a VMI whose pod interface was
// auto-attached cannot hotplug.
func TestInterfaceHotplugUpdates(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	update := func(o *unstructured.Unstructured) error {
		return env.Client.Update(ctx, o, client.FieldValidation(metav1.FieldValidationStrict))
	}
	o := validVMI("nic-hotplug")
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatalf("create: %v", err)
	}
	addMultus(t, o, "blue", map[string]any{"name": "blue", "bridge": map[string]any{}})
	if err := update(o); err != nil {
		t.Fatalf("hotplug: %v", err)
	}
	changed := o.DeepCopy()
	at(t, changed, "spec.domain.devices.interfaces[1]")["macAddress"] = "02:00:00:00:00:02"
	wantRejected(t, update(changed), invalid, badValue, "spec.domain.devices.interfaces")
	at(t, o, "spec.domain.devices.interfaces[1]")["state"] = "absent"
	if err := update(o); err != nil {
		t.Fatalf("unplug (state: absent): %v", err)
	}
	back := o.DeepCopy()
	delete(at(t, back, "spec.domain.devices.interfaces[1]"), "state")
	wantRejected(t, update(back), invalid, badValue, "spec.domain.devices.interfaces")
	s := at(t, o, "spec")
	s["networks"] = s["networks"].([]any)[:1]
	d := at(t, o, "spec.domain.devices")
	d["interfaces"] = d["interfaces"].([]any)[:1]
	if err := update(o); err != nil {
		t.Fatalf("remove the unplugged interface: %v", err)
	}

	auto := validVMI("nic-hotplug-auto")
	delete(at(t, auto, "spec.domain.devices"), "interfaces")
	delete(at(t, auto, "spec"), "networks")
	if err := env.Client.Create(ctx, auto); err != nil {
		t.Fatalf("create: %v", err)
	}
	at(t, auto, "spec")["networks"] = []any{}
	at(t, auto, "spec.domain.devices")["interfaces"] = []any{}
	addMultus(t, auto, "blue", map[string]any{"name": "blue", "bridge": map[string]any{}})
	wantRejected(t, update(auto), invalid, badValue, "spec.domain.devices.interfaces")
}
