package controllers

import (
	"errors"
	"fmt"
	"testing"
)

// TestOnlyUnplugPending: a pass whose only trouble is unplugs the guest has not acknowledged
// yet is no failure (it looks again soon); anything else among them still is.
func TestOnlyUnplugPending(t *testing.T) {
	p := unplugPending{"disk hot"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{p, true},
		{errors.Join(p, unplugPending{"nic net1"}), true},
		{errors.Join(nil, errors.Join(p), nil), true},
		{errors.Join(p, errors.New("hotplug volume x: boom")), false},
		{fmt.Errorf("described: %w", p), true},
		{errors.Join(fmt.Errorf("described: %w", p), errors.New("boom")), false},
		{errors.New("boom"), false},
	} {
		if got := onlyUnplugPending(tc.err); got != tc.want {
			t.Errorf("onlyUnplugPending(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
