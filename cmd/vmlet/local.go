package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vmletv1 "github.com/vmlet/vmlet/api/v1alpha1"
	"github.com/vmlet/vmlet/local"
)

func localCmd() *cobra.Command {
	cfg := local.Config{}
	var nf *nodeFlags
	var bootTimeout time.Duration
	c := &cobra.Command{
		Use:   "local",
		Short: "Single-machine mode: embedded API server, node agent, demo VM",
		Long: `local starts etcd and kube-apiserver (data persisted in --state-dir), installs the
vmlet CRDs, registers this machine as a Node, runs the node agent with launchers as local
processes, applies the demo VMI and waits until it runs. Ctrl-C shuts the VMs down gracefully and
stops everything; the next start picks up the same objects.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sc, nc, err := nf.parse()
			if err != nil {
				return err
			}
			cfg.StorageConfig, cfg.Network, cfg.TCGCacheMiB, cfg.LauncherUser = sc, nc, nf.tcgCacheMiB, nf.user
			cfg.Out = cmd.OutOrStdout()
			cfg.Log = zap.New(zap.UseDevMode(false), zap.WriteTo(logWriter(cfg.StateDir)))
			return runLocal(cmd.Context(), cfg, bootTimeout)
		},
	}
	self, _ := os.Executable()
	host, _ := os.Hostname()
	f := c.Flags()
	f.StringVar(&cfg.StateDir, "state-dir", "/var/lib/vmlet/local", "persisted state: etcd data, kubeconfig, logs")
	f.StringVar(&cfg.RunRoot, "run-root", "/run/vmlet", "launcher run folders (keep short: unix socket paths)")
	f.StringVar(&cfg.AssetsDir, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "folder with kube-apiserver, etcd, kubectl")
	f.StringVar(&cfg.CRDDir, "crds", "config/crd/bases", "folder of CRD manifests")
	f.StringVar(&cfg.NodeName, "node-name", strings.ToLower(host), "this node's name")
	f.StringVar(&cfg.LauncherBinary, "launcher", filepath.Join(filepath.Dir(self), "vmlet-launcher"), "vmlet-launcher binary")
	f.StringVar(&cfg.Demo, "demo", "config/samples/vmi-demo.yaml", "VMI manifest to apply at start (empty: none)")
	nf = addNodeFlags(f, true)
	f.DurationVar(&bootTimeout, "boot-timeout", 3*time.Minute, "how long to wait for the demo VMI to run")
	return c
}

func runLocal(ctx context.Context, cfg local.Config, bootTimeout time.Duration) error {
	out := cfg.Out
	// 0711: the launchers' user passes through to the image cache and volume folders (which
	// keep their own modes); etcd data, kubeconfig and logs stay root's (0700/0600).
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("make state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
		return fmt.Errorf("make state dir: %w", err)
	}
	fmt.Fprintf(out, "vmlet local: starting etcd + kube-apiserver (state in %s)...\n", cfg.StateDir)
	s, err := local.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "vmlet local: shutting VMs down and stopping the control plane...")
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.Stop(sctx); err != nil {
			fmt.Fprintln(os.Stderr, "vmlet local: stop:", err)
		}
		fmt.Fprintln(out, "vmlet local: stopped")
	}()
	kc := s.CP.Kubeconfig
	fmt.Fprintf(out, "vmlet local: API server up; kubeconfig %s; node %s registered\n", kc, cfg.NodeName)
	if cfg.Demo != "" {
		key, err := s.ApplyDemo(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "vmlet local: applied demo VMI %s from %s; waiting for it to run (TCG boot takes a few seconds)...\n", key, cfg.Demo)
		wctx, cancel := context.WithTimeout(ctx, bootTimeout)
		vmi, err := s.WaitPhase(wctx, key, "Running")
		cancel()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "vmlet local: VMI %s is %s (reason %q, accelerator %s)\n", key, vmi.Status.Phase, vmi.Status.Reason, accel(vmi.Status.Launcher))
		fmt.Fprintf(out, `
Try (kubectl from %[4]s, built with the control plane):
  export KUBECONFIG=%[1]s PATH=%[4]s:$PATH
  kubectl get vmis -o wide
  kubectl get vmi %[2]s -o yaml
  kubectl patch vmi %[2]s --type merge -p '{"spec":{"paused":true}}'
  tail -f %[3]s/logs/serial.log      # the guest's console
  kubectl delete vmi %[2]s

Ctrl-C stops everything (VMIs stay in etcd and run again on the next start).
`, kc, key.Name, s.Runtime.Dir(string(vmi.UID)), cfg.AssetsDir)
	}
	<-ctx.Done()
	return nil
}

func accel(l *vmletv1.LauncherStatus) string {
	if l == nil || l.Accelerator == "" {
		return "unknown"
	}
	return fmt.Sprintf("%s (%s)", l.Accelerator, l.AccelerationReason)
}

// logWriter sends controller logs to <state>/vmlet.log so the terminal shows progress only.
func logWriter(stateDir string) io.Writer {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return os.Stderr
	}
	f, err := os.OpenFile(filepath.Join(stateDir, "vmlet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return os.Stderr
	}
	return f
}
