package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
)

// The Node annotations top reads; the node agent's heartbeat (package controllers) writes
// them. They are repeated here so that vmctl does not link the controllers; a test keeps them
// equal.
const (
	annotMetricsAddress = "vmlet.dev/metrics-address"
	annotHeartbeat      = "vmlet.dev/heartbeat"
)

// discover lists the Nodes (their metadata only) and returns the agents' metrics endpoints,
// by node name, and a warning for each vmlet node that advertises none or a malformed one.
func (c *cli) discover(ctx context.Context, k *kubeFlags) ([]target, []string, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, nil, err
	}
	if cfg.Timeout == 0 { // no --request-timeout
		cfg.Timeout = c.timeout
	}
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata client: %w", err)
	}
	list, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	var (
		ts       []target
		warnings []string
	)
	for _, n := range list.Items {
		addr, ok := n.Annotations[annotMetricsAddress]
		if !ok {
			if _, agent := n.Annotations[annotHeartbeat]; agent {
				warnings = append(warnings, fmt.Sprintf("node %s runs a vmlet agent that serves no metrics (no %s annotation)", n.Name, annotMetricsAddress))
			}
			continue
		}
		u, err := metricsURL(addr)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("node %s: %v", n.Name, err))
			continue
		}
		ts = append(ts, target{node: n.Name, url: u})
	}
	ts = oneScrapePerURL(ts)
	if len(ts) == 0 {
		return nil, warnings, fmt.Errorf("no node advertises its agent's metrics (annotation %s on %d node(s) listed); use --metrics URL", annotMetricsAddress, len(list.Items))
	}
	slices.SortFunc(ts, func(a, b target) int { return strings.Compare(a.node, b.node) })
	return ts, warnings, nil
}

// metricsURL is http://host:port/metrics for the annotation's host:port.
func metricsURL(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return "", fmt.Errorf("%s %q is not host:port", annotMetricsAddress, addr)
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics", nil
}

// oneScrapePerURL merges the targets of nodes that advertise the same endpoint: one process
// serving several nodes (`vmlet local --nodes N` serves them all on one listener) is scraped
// once, its series' node labels saying which VMI runs where.
func oneScrapePerURL(ts []target) []target {
	var out []target
	at := map[string]int{}
	for _, t := range ts {
		i, seen := at[t.url]
		if !seen {
			at[t.url] = len(out)
			out = append(out, t)
			continue
		}
		if out[i].node != "" {
			out[i].nodes, out[i].node = []string{out[i].node}, ""
		}
		out[i].nodes = append(out[i].nodes, t.node)
	}
	return out
}
