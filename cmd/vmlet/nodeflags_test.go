package main

import (
	"errors"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/vmlet/vmlet/nodeagent"
)

// TestNodeFlagsPullBackOff: the image pull back-off defaults to the kubelet's (10 s to 5 min),
// can be changed, and a zero or inverted one is refused.
func TestNodeFlagsPullBackOff(t *testing.T) {
	tests := []struct {
		args         []string
		initial, max time.Duration
		bad          bool
	}{
		{nil, 10 * time.Second, 5 * time.Minute, false},
		{[]string{"--image-pull-backoff=1s", "--image-pull-backoff-max=4s"}, time.Second, 4 * time.Second, false},
		{[]string{"--image-pull-backoff=0s"}, 0, 0, true},
		{[]string{"--image-pull-backoff=1m", "--image-pull-backoff-max=10s"}, 0, 0, true},
	}
	for _, tt := range tests {
		f := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		n := addNodeFlags(f, false)
		if err := f.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		sc, _, err := n.parse()
		if tt.bad {
			if !errors.Is(err, nodeagent.ErrBadFlag) {
				t.Errorf("%v: err %v, want ErrBadFlag", tt.args, err)
			}
			continue
		}
		if err != nil || sc.PullBackOff != tt.initial || sc.PullBackOffMax != tt.max {
			t.Errorf("%v: back-off %s..%s (%v), want %s..%s", tt.args, sc.PullBackOff, sc.PullBackOffMax, err, tt.initial, tt.max)
		}
	}
}
