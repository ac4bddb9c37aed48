package main

import (
	"context"
	"fmt"
	"net"

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
	sc, err := nodeagent.ClusterStreams(ctx, c, o.nodeName, ln, o.streamsAdvertise)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("streams: %w", err)
	}
	return sc, nil
}
