package v1alpha1_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hotplugVMI is validVMI with CPU and memory hotplug: sockets 1 of 4, guest 128Mi of 512Mi.
func hotplugVMI(t *testing.T, name string) *unstructured.Unstructured {
	o := validVMI(name)
	at(t, o, "spec.domain")["cpu"] = map[string]any{"sockets": int64(1), "maxSockets": int64(4)}
	at(t, o, "spec.domain")["memory"] = map[string]any{"guest": "128Mi", "maxGuest": "512Mi"}
	return o
}

// TestHotplugResourceUpdates checks which changes of spec.domain.cpu and spec.domain.memory a
// vmi with maxSockets and maxGuest accepts: sockets within [1, maxSockets], guest up to
// maxGuest; the maxima themselves and the rest of cpu and memory stay fixed.
func TestHotplugResourceUpdates(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, o *unstructured.Unstructured)
		field  string // "" = the update is allowed
	}{
		{"plug sockets up to maxSockets", set("spec.domain.cpu", "sockets", int64(4)), ""},
		{"sockets past maxSockets", set("spec.domain.cpu", "sockets", int64(5)), "spec.domain.cpu.sockets"},
		{"sockets 0", set("spec.domain.cpu", "sockets", int64(0)), "spec.domain.cpu.sockets"},
		{"drop sockets (= 1)", func(t *testing.T, o *unstructured.Unstructured) { delete(at(t, o, "spec.domain.cpu"), "sockets") }, ""},
		{"change maxSockets", set("spec.domain.cpu", "maxSockets", int64(8)), "spec.domain"},
		{"change cores", set("spec.domain.cpu", "cores", int64(2)), "spec.domain"},
		{"grow guest memory to maxGuest", set("spec.domain.memory", "guest", "512Mi"), ""},
		{"grow guest memory in other units", set("spec.domain.memory", "guest", "0.25Gi"), ""},
		{"guest memory past maxGuest", set("spec.domain.memory", "guest", "513Mi"), "spec.domain.memory.guest"},
		{"change maxGuest", set("spec.domain.memory", "maxGuest", "1Gi"), "spec.domain"},
	}
	env := apiServer(t)
	ctx := testContext(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := hotplugVMI(t, fmt.Sprintf("hotplug-update-%d", i))
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
			wantRejected(t, err, invalid, "", tc.field)
		})
	}
}

// TestHotplugResourceCreate checks the maxima at creation: sockets and guest must not exceed
// them, and maxGuest needs guest.
func TestHotplugResourceCreate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(t *testing.T, o *unstructured.Unstructured)
		field  string
	}{
		{"sockets past maxSockets", set("spec.domain.cpu", "sockets", int64(5)), "spec.domain.cpu.sockets"},
		{"maxSockets times cores past 512", set("spec.domain.cpu", "cores", int64(200)), "spec.domain.cpu.maxSockets"},
		{"guest past maxGuest", set("spec.domain.memory", "maxGuest", "64Mi"), "spec.domain.memory.guest"},
		{"maxGuest without guest", func(t *testing.T, o *unstructured.Unstructured) {
			m := at(t, o, "spec.domain.memory")
			delete(m, "guest")
			at(t, o, "spec.domain")["resources"] = map[string]any{"requests": map[string]any{"memory": "128Mi"}}
		}, "spec.domain.memory.maxGuest"},
		{"maxGuest past 4Ti", set("spec.domain.memory", "maxGuest", "5Ti"), "spec.domain.memory.maxGuest"},
	}
	env := apiServer(t)
	ctx := testContext(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := hotplugVMI(t, fmt.Sprintf("hotplug-create-%d", i))
			tc.mutate(t, o)
			wantRejected(t, env.Client.Create(ctx, o), invalid, "", tc.field)
		})
	}
}

// TestGuestMemoryNotBelowBoot checks that once the node agent wrote status.memory.guestAtBoot,
// spec.domain.memory.guest cannot go below it, and that status writes are not held by the rule.
func TestGuestMemoryNotBelowBoot(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	o := hotplugVMI(t, "hotplug-boot")
	at(t, o, "spec.domain.memory")["guest"] = "256Mi"
	if err := env.Client.Create(ctx, o); err != nil {
		t.Fatalf("create: %v", err)
	}
	o.Object["status"] = map[string]any{"memory": map[string]any{"guestAtBoot": "256Mi", "guestCurrent": "256Mi"}}
	if err := env.Client.Status().Update(ctx, o); err != nil {
		t.Fatalf("status update: %v", err)
	}
	at(t, o, "spec.domain.memory")["guest"] = "384Mi"
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("grow guest: %v", err)
	}
	at(t, o, "spec.domain.memory")["guest"] = "256Mi"
	if err := env.Client.Update(ctx, o); err != nil {
		t.Fatalf("shrink guest back to its boot size: %v", err)
	}
	at(t, o, "spec.domain.memory")["guest"] = "128Mi"
	wantRejected(t, env.Client.Update(ctx, o), invalid, "", "spec.domain.memory.guest")
}
