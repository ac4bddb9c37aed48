package main

import (
	"context"
	"fmt"
	"net"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/nodeagent"
)

// agentStreams opens the VMI stream server's listener with a self-signed certificate that
// trusts the subresources CA the controller published (nil, nil with --streams-bind-address "").
func agentStreams(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, o agentOptions) (*nodeagent.StreamsConfig, error) {
	if o.streamsAddr == "" {
		return nil, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	ln, err := net.Listen("tcp", o.streamsAddr)
	if err != nil {
		return nil, fmt.Errorf("streams: %w", err)
	}
	// The controller publishes the CA on its start, which may come after ours: wait a while.
	wctx, cancel := context.WithTimeout(ctx, caWait)
	defer cancel()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		sc, err := nodeagent.ClusterStreams(wctx, c, o.nodeName, ln, o.streamsAdvertise)
		if err == nil {
			return sc, nil
		}
		select {
		case <-wctx.Done():
			ln.Close()
			return nil, fmt.Errorf("streams: %w", err)
		case <-t.C:
		}
	}
}

// caWait is how long the agent waits for the subresources CA at start.
const caWait = 2 * time.Minute
