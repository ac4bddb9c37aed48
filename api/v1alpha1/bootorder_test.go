package v1alpha1_test

import (
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestBootOrderValidation: the API server rejects what KubeVirt's webhook rejects about
// bootOrder (values below 1, a value used twice across disks and interfaces), plus values above
// 65535, with a cause on the field and the message a user reads; distinct values are accepted.
func TestBootOrderValidation(t *testing.T) {
	env := apiServer(t)
	ctx := testContext(t)
	const unique = "Invalid value: every bootOrder must be unique across disks and interfaces"
	secondDisk := func(o *unstructured.Unstructured, order int64) {
		s := at(t, o, "spec")
		s["volumes"] = append(s["volumes"].([]any), map[string]any{"name": "scratch", "emptyDisk": map[string]any{"capacity": "1Gi"}})
		d := at(t, o, "spec.domain.devices")
		d["disks"] = append(d["disks"].([]any), map[string]any{"name": "scratch", "bootOrder": order, "disk": map[string]any{"bus": "sata"}})
	}
	tests := []struct {
		name    string
		mutate  func(o *unstructured.Unstructured)
		field   string // "": accepted
		message string // the cause's message
	}{
		{"disk bootOrder 0", func(o *unstructured.Unstructured) { at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(0) },
			"spec.domain.devices.disks[0].bootOrder", "Invalid value: 0: spec.domain.devices.disks[0].bootOrder in body should be greater than or equal to 1"},
		{"interface bootOrder 0", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.interfaces[0]")["bootOrder"] = int64(0)
		},
			"spec.domain.devices.interfaces[0].bootOrder", "Invalid value: 0: spec.domain.devices.interfaces[0].bootOrder in body should be greater than or equal to 1"},
		{"disk bootOrder 65536", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(65536)
		},
			"spec.domain.devices.disks[0].bootOrder", "Invalid value: 65536: spec.domain.devices.disks[0].bootOrder in body should be less than or equal to 65535"},
		{"two disks with bootOrder 1", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(1)
			secondDisk(o, 1)
		}, "spec.domain.devices.disks", unique},
		{"two interfaces with bootOrder 2", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.interfaces[0]")["bootOrder"] = int64(2)
			addMultus(t, o, "blue", map[string]any{"name": "blue", "bridge": map[string]any{}, "bootOrder": int64(2)})
		}, "spec.domain.devices.interfaces", unique},
		{"a disk and an interface with bootOrder 1", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(1)
			at(t, o, "spec.domain.devices.interfaces[0]")["bootOrder"] = int64(1)
		}, "spec.domain.devices.interfaces", unique},
		{"distinct values on disks and an interface", func(o *unstructured.Unstructured) {
			at(t, o, "spec.domain.devices.disks[0]")["bootOrder"] = int64(2)
			secondDisk(o, 65535)
			at(t, o, "spec.domain.devices.interfaces[0]")["bootOrder"] = int64(1)
		}, "", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := validVMI(fmt.Sprintf("bootorder-%d", i))
			tt.mutate(o)
			err := env.Client.Create(ctx, o)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("rejected: %v", err)
				}
				return
			}
			wantRejected(t, err, metav1.StatusReasonInvalid, "", tt.field)
			var status apierrors.APIStatus
			if !errors.As(err, &status) {
				t.Fatalf("not an API status: %v", err)
			}
			for _, c := range status.Status().Details.Causes {
				if c.Field == tt.field && c.Message == tt.message {
					return
				}
			}
			t.Errorf("no cause on %s with message %q: %+v", tt.field, tt.message, status.Status().Details.Causes)
		})
	}
}
