package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmlet/vmlet/internal/vmtop"
)

// errNotFound: top NAME found no such VMI (exit status 3).
var errNotFound = errors.New("not found")

type topOptions struct {
	kube          kubeFlags
	allNamespaces bool
	metrics       []string
	interval      time.Duration
	output        string
}

func newTopCmd(c *cli) *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top [NAME] [-n NAMESPACE | -A] [--metrics URL]... [--interval 2s] [-o table|json]",
		Short: "CPU, memory, disk and network use of VMIs, from the node agents' metrics",
		Long: `Shows what VMIs use, like "kubectl top pod": for each VMI its node, CPU, resident memory,
and disk and network throughput.

It lists the Nodes (kubectl's kubeconfig rules and flags; needs "list nodes"), reads where
each node's vmlet agent serves Prometheus metrics (the Node annotation
vmlet.dev/metrics-address, host:port → http://host:port/metrics), scrapes every agent twice
--interval apart and prints, per VMI:

  CPU(%)       the rate of kubevirt_vmi_cpu_usage_seconds_total (vCPUs and QEMU's threads)
               as a percentage of ONE CPU, like top(1): a guest keeping 2 CPUs busy is 200%
  MEMORY       kubevirt_vmi_memory_resident_bytes, the QEMU process' resident set (IEC units)
  DISK-READ    kubevirt_vmi_storage_read_traffic_bytes_total, B/s summed over drives
  DISK-WRITE   kubevirt_vmi_storage_write_traffic_bytes_total, B/s summed over drives
  NET-RX       kubevirt_vmi_network_receive_bytes_total, B/s summed over interfaces
  NET-TX       kubevirt_vmi_network_transmit_bytes_total, B/s summed over interfaces

Rows are sorted by namespace, name, node (a VMI being migrated can show on two nodes). A
counter that went down between the scrapes was reset and counts from zero (rates are never
negative). "-" is a figure whose series the agent did not serve in both scrapes (a VMI that
started between them has memory but no rates yet). -o json prints all figures as numbers
(cpuCores, bytes and bytes per second; null when unknown), memoryDomainBytes included.

--metrics URL (repeatable) scrapes the given endpoints instead and needs no kubeconfig, for
use on a node: vmctl top -A --metrics http://127.0.0.1:PORT/metrics. The namespace is still
kubectl's: -n, else the kubeconfig context's, else "default"; -A shows all.

An agent that does not answer is a warning on stderr naming its node; the others are still
shown. A node that runs a vmlet agent (vmlet.dev/heartbeat) without advertising metrics is a
warning too; nodes without either annotation are not vmlet nodes and are skipped.

` + exitCodesHelp,
		Example: `  # All VMIs of all namespaces
  vmctl top -A

  # One VMI, as JSON, sampled over 5 seconds
  vmctl top my-vm -n prod -o json --interval 5s

  # The agent on this node, without a kubeconfig
  vmctl top -A --metrics http://127.0.0.1:8443/metrics`,
		Args: maxArgs(1, "one VMI name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return c.top(cmd.Context(), o, name)
		},
	}
	fs := cmd.Flags()
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "VMIs of all namespaces")
	fs.StringArrayVar(&o.metrics, "metrics", nil, "scrape this metrics URL instead of discovering the agents (repeatable)")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "time between the two scrapes the rates are computed over")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	o.kube.addFlags(fs)
	return cmd
}

func (c *cli) top(ctx context.Context, o *topOptions, name string) error {
	if o.output != "table" && o.output != "json" {
		return usageError(fmt.Sprintf("--output %q: want table or json", o.output))
	}
	if o.interval <= 0 {
		return usageError(fmt.Sprintf("--interval %s: must be positive", o.interval))
	}
	if o.allNamespaces && name != "" {
		return usageError("a VMI cannot be retrieved by name across all namespaces (drop -A or NAME)")
	}
	namespace := ""
	if !o.allNamespaces {
		var err error
		if namespace, err = o.kube.namespace(); err != nil {
			return err
		}
	}
	var (
		targets  []target
		warnings []string
		err      error
	)
	if len(o.metrics) > 0 {
		targets, err = metricsTargets(o.metrics)
	} else {
		targets, warnings, err = c.discover(ctx, &o.kube)
	}
	warn := func(ws []string) {
		for _, w := range ws {
			fmt.Fprintf(c.stderr, "vmctl: warning: %s\n", w)
		}
	}
	warn(warnings)
	if err != nil {
		return err
	}
	res := c.sample(ctx, targets, o.interval)
	if err := ctx.Err(); err != nil { // ^C
		return err
	}
	warn(res.failed)
	if len(res.failed) == len(targets) {
		return fmt.Errorf("no agent answered (%d tried)", len(targets))
	}
	warnings = append(warnings, res.failed...)
	rows := vmtop.Filter(res.rows, namespace, name)
	if name != "" && len(rows) == 0 {
		return notFoundError{namespace: namespace, name: name, answered: len(targets) - len(res.failed), failed: len(res.failed)}
	}
	if o.output == "json" {
		return printTopJSON(c.stdout, rows, warnings)
	}
	if len(rows) == 0 {
		if namespace == "" {
			fmt.Fprintln(c.stderr, "No VMIs found.")
		} else {
			fmt.Fprintf(c.stderr, "No VMIs found in %s namespace.\n", namespace)
		}
		return nil
	}
	return printTopTable(c.stdout, rows)
}

// notFoundError is errNotFound for one VMI, saying where top looked.
type notFoundError struct {
	namespace, name  string
	answered, failed int
}

func (e notFoundError) Error() string {
	msg := fmt.Sprintf("vmi %s/%s not found in the metrics of %d agent(s)", e.namespace, e.name, e.answered)
	if e.failed > 0 {
		msg += fmt.Sprintf("; %d did not answer (see the warnings)", e.failed)
	}
	return msg
}

func (e notFoundError) Is(target error) bool { return target == errNotFound }

// metricsTargets are the --metrics URLs; their node comes from the series' node label.
func metricsTargets(urls []string) ([]target, error) {
	var ts []target
	for _, u := range urls {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, usageError(fmt.Sprintf("--metrics %q: want an http:// or https:// URL", u))
		}
		ts = append(ts, target{url: u})
	}
	return ts, nil
}
