// Command vmlet-cluster brings a real Kubernetes (one node, or two with --nodes 2: two kubelets
// with a containerd each, the second tainted realcluster.vmlet.dev/secondary) up on this machine
// and down again (test/realcluster): `vmlet-cluster up` starts it detached (idempotent: a running
// cluster is kept), runs the deploy hook hack/cluster-deploy.sh, and prints the kubeconfig and
// the kubectl command; `vmlet-cluster down` removes it and everything it made (a no-op when none runs) and
// fails if anything is left. Progress goes to stderr. Root only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmlet/vmlet/test/realcluster"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vmlet-cluster:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("vmlet-cluster", flag.ContinueOnError)
	deploy := fs.String("deploy", filepath.Join(realcluster.RepoRoot(), "hack", "cluster-deploy.sh"),
		"script run after the cluster is up (KUBECONFIG, KUBECTL and CTR_ADDRESS set); empty: none")
	undeploy := fs.String("undeploy", filepath.Join(realcluster.RepoRoot(), "hack", "cluster-undeploy.sh"),
		"script down runs first while the cluster still answers (KUBECONFIG, KUBECTL set): deletes the VMIs while their agent can clean the node; empty: none")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long up may take")
	nodes := fs.Int("nodes", 1, "nodes (kubelet + containerd) up starts: 1 or 2; the second is tainted "+
		realcluster.SecondaryNodeTaintKey+" (NoSchedule): VMIs that tolerate it can run and migrate there")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: vmlet-cluster [flags] up|down|status")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one command: up, down or status")
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root (containerd, kubelet, iptables, cgroups)")
	}
	o := realcluster.Options{Detach: true, Log: os.Stderr, Nodes: *nodes}
	switch fs.Arg(0) {
	case "up":
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		t0 := time.Now()
		c, reused, err := realcluster.Up(ctx, o)
		if err != nil {
			return err
		}
		if reused {
			fmt.Fprintln(os.Stderr, "vmlet-cluster: a cluster is already up; kept it")
		} else {
			fmt.Fprintf(os.Stderr, "vmlet-cluster: cluster up in %s\n", time.Since(t0).Round(time.Millisecond))
		}
		if *deploy != "" {
			if err := runDeploy(ctx, *deploy, c); err != nil {
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "vmlet-cluster: ready. Use:\n  export KUBECONFIG=%s\n  %s get nodes\n", c.Kubeconfig, c.KubectlPath)
		fmt.Println(c.Kubeconfig)
		return nil
	case "down":
		t0 := time.Now()
		if *undeploy != "" {
			if err := runUndeploy(*undeploy); err != nil {
				return err
			}
		}
		if err := realcluster.Down(o); err != nil {
			return err
		}
		if left := realcluster.Residue(realcluster.Options{}); len(left) > 0 {
			return fmt.Errorf("left after down:\n  %s", strings.Join(left, "\n  "))
		}
		fmt.Fprintf(os.Stderr, "vmlet-cluster: down in %s; nothing left\n", time.Since(t0).Round(time.Millisecond))
		return nil
	case "status":
		left := realcluster.Residue(realcluster.Options{})
		if len(left) == 0 {
			fmt.Println("down")
			return nil
		}
		fmt.Printf("up (or partly):\n  %s\n", strings.Join(left, "\n  "))
		return nil
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", fs.Arg(0))
}

// runUndeploy runs the undeploy hook (hack/cluster-undeploy.sh) when the cluster Up made
// answers: a cluster stopped with VMIs on it would leave their node folders behind, because
// their agent is killed with the kubelet's pods. A cluster that is not up (or was started by a
// test) is left to Down.
func runUndeploy(script string) error {
	if !realcluster.UpRunning(realcluster.Options{}) {
		return nil
	}
	kubeconfig := filepath.Join(realcluster.DefaultRoot, "kubeconfig")
	bin, err := realcluster.Binaries(os.Stderr)
	if err != nil {
		return err
	}
	kubectl := filepath.Join(bin, "kubectl")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "get", "--raw", "/readyz").Run() != nil {
		fmt.Fprintln(os.Stderr, "vmlet-cluster: the API server does not answer; nothing to undeploy")
		return nil
	}
	fmt.Fprintf(os.Stderr, "vmlet-cluster: undeploy hook %s...\n", script)
	ctx, cancel = context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "KUBECTL="+kubectl)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("undeploy hook %s: %w", script, err)
	}
	return nil
}

// runDeploy runs the deploy hook (hack/cluster-deploy.sh: vmlet via kubectl apply -k, a sample
// VMI) against the cluster.
func runDeploy(ctx context.Context, script string, c *realcluster.Cluster) error {
	if _, err := os.Stat(script); err != nil {
		return fmt.Errorf("deploy hook: %w", err)
	}
	fmt.Fprintf(os.Stderr, "vmlet-cluster: deploy hook %s...\n", script)
	cmd := exec.CommandContext(ctx, "bash", script)
	var sockets, states []string
	for _, n := range c.Nodes {
		sockets = append(sockets, n.ContainerdSocket)
		states = append(states, n.HostPath("/var/lib/vmlet"))
	}
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "KUBECTL="+c.KubectlPath,
		"CTR_ADDRESS="+strings.Join(sockets, " "), "VMLET_NODE_STATE="+strings.Join(states, " "), "VMLET_CLUSTER_NODE="+c.NodeName)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("deploy hook %s: %w", script, err)
	}
	return nil
}
