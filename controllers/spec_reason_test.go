package controllers

import (
	"errors"
	"testing"

	"github.com/vmlet/vmlet/controllers/translate"
	"github.com/vmlet/vmlet/controllers/vmistatus"
	"github.com/vmlet/vmlet/storage"
)

// TestSpecReason: the VMI reason of a translation error (translate's tests check which errors
// carry which cause).
func TestSpecReason(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want vmistatus.Reason
	}{
		{"unsupported", &translate.SpecError{Field: "spec.x", Reason: "r", Err: translate.ErrUnsupported}, vmistatus.ReasonUnsupported},
		{"storage's reason", &translate.SpecError{Field: "spec.volumes[0]", Reason: "r",
			Err: &storage.VolumeError{Volume: "v", Err: storage.ErrUnknownClaim}}, storage.ReasonVolumeNotFound},
		{"invalid value", &translate.SpecError{Field: "spec.x", Reason: "r"}, vmistatus.ReasonInvalidSpec},
		{"not a spec error", errors.New("x"), vmistatus.ReasonInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := specReason(tt.err); got != tt.want {
				t.Errorf("specReason = %q, want %q", got, tt.want)
			}
		})
	}
}
