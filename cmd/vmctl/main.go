package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	c := newCLI(os.Stdin, os.Stdout, os.Stderr)
	c.plugin = strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe") == pluginName
	code := run(ctx, c, os.Args[1:])
	stop()
	os.Exit(code)
}

// cli is what every command shares: the streams, the global flags and the seams tests use.
type cli struct {
	sock    string
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer

	// now and sleep are top's clock: between its two scrapes it sleeps --interval.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	// http scrapes the agents.
	http *http.Client

	// plugin: run as kubectl-vmctl (the help says "kubectl vmctl").
	plugin bool
	// kubeConfig, when set, replaces the kubeconfig rules (tests; an embedding program).
	kubeConfig func(*kubeFlags) (*rest.Config, error)
	// lookPath finds ssh.
	lookPath func(string) (string, error)
}

func newCLI(stdin io.Reader, stdout, stderr io.Writer) *cli {
	return &cli{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now, sleep: sleepCtx, http: &http.Client{}, lookPath: exec.LookPath}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, c *cli, args []string) int {
	quietClientGo()
	root := newRootCmd(c)
	root.SetArgs(args)
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var se *exitStatusError
	if !errors.As(err, &se) || !se.quiet {
		fmt.Fprintf(c.stderr, "vmctl: %v\n", err)
	}
	code := exitCode(err)
	if code == exitUsage {
		fmt.Fprintf(c.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

type usageError string

func (e usageError) Error() string { return string(e) }

func newRootCmd(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "vmctl",
		Short: "The vmlet CLI",
		Long: `vmctl is the vmlet CLI.

The VM commands address a VMI by NAME through the Kubernetes API, as kubectl does: kubectl's
kubeconfig rules and flags (--kubeconfig, $KUBECONFIG, --context, -n/--namespace, else the
context's namespace, else "default"), and the aggregated API subresources.vmlet.dev/v1alpha1
for console, vnc, qmp, qmp-log, guest agent data and port-forward (RBAC on
virtualmachineinstances/<subresource> in that group: the view, edit and admin ClusterRoles
of config/rbac). pause/unpause set spec.paused and migrate creates a
VirtualMachineInstanceMigration, with the ordinary vmlet.dev API.

As a kubectl plugin: put the binary on PATH as kubectl-vmctl ("make install-plugin") and run
"kubectl vmctl ...": the same commands and flags.

"vmctl drain" and "vmctl uncordon" drain a node of its VMIs; "vmctl evacuate-cancel" cancels
an evacuation started by an eviction. "vmctl top" reads the node
agents' metrics, found through the Kubernetes API or given with --metrics.

Node-local work, as root on the node, skips the API: --launcher PATH talks to one
vmlet-launcher over its socket, the one the node agent uses: <run dir>/launcher.sock, where
the run dir is <--run-root>/<vmi uid> (/run/vmlet/<uid> in local mode) or
<--launcher-root>/<vmi uid> for launcher pods (/var/run/vmlet/launchers/<uid>); the uid is
kubectl get vmi NAME -o jsonpath='{.metadata.uid}'. status and shutdown need it; console,
qmp, qmp-log, pause and unpause take it instead of NAME.

` + exitCodesHelp,
		Example: `  vmctl console my-vm -n prod             (Ctrl-] quits)
  vmctl qmp my-vm query-status
  vmctl qmp my-vm                          (the QMP shell: Tab completes, Ctrl-D leaves)
  vmctl qmp-log my-vm -f
  vmctl vnc screenshot my-vm -o my-vm.png
  vmctl port-forward my-vm 8080:80
  vmctl ssh debian@my-vm
  vmctl pause my-vm
  vmctl migrate my-vm --wait
  kubectl vmctl guestosinfo my-vm -o table
  vmctl top -A
  vmctl drain node-1 --deadline 5m
  vmctl --launcher /run/vmlet/<uid>/launcher.sock status`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// A root that runs makes cobra hand it unknown commands: refuse them as usage errors.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError(fmt.Sprintf("unknown command %q", args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Usage()
			return usageError("missing command")
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err.Error()) })
	pf := root.PersistentFlags()
	pf.StringVar(&c.sock, "launcher", "", "node-local: the launcher's socket, <run dir>/launcher.sock, instead of a VMI NAME")
	pf.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of one call: an API request or launcher call (not qmp-log -f, console, vnc, port-forward, ssh, a QMP shell), one scrape")
	root.AddGroup(&cobra.Group{ID: "vm", Title: "VM commands (a VMI by NAME through the Kubernetes API; some take --launcher PATH instead):"})
	for _, sub := range vmCmds(c) {
		root.AddCommand(sub)
	}
	root.AddGroup(&cobra.Group{ID: "cluster", Title: "Cluster commands (kubeconfig, or --metrics):"})
	top := newTopCmd(c)
	top.GroupID = "cluster"
	root.AddCommand(top)
	for _, sub := range []*cobra.Command{newDrainCmd(c), newUncordonCmd(c), newEvacuateCancelCmd(c)} {
		sub.GroupID = "cluster"
		root.AddCommand(sub)
	}
	root.AddGroup(&cobra.Group{ID: "launcher", Title: "Node-local commands (need --launcher):"})
	for _, sub := range launcherCmds(c) {
		sub.GroupID = "launcher"
		root.AddCommand(sub)
	}
	if c.plugin {
		asPlugin(root)
	}
	return root
}

// pluginName is the binary's name as a kubectl plugin: kubectl runs kubectl-vmctl for
// "kubectl vmctl ...".
const pluginName = "kubectl-vmctl"

// asPlugin makes the help say "kubectl vmctl" where it says "vmctl".
func asPlugin(root *cobra.Command) {
	root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl vmctl"}
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		cmd.Example = strings.ReplaceAll(strings.ReplaceAll(cmd.Example, "kubectl vmctl ", "vmctl "), "vmctl ", "kubectl vmctl ")
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// noArgs, exactArgs and maxArgs are cobra's argument checks, failing as usage errors.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(fmt.Sprintf("%s: unexpected arguments %q", cmd.Name(), args))
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError(fmt.Sprintf("%s takes %s", cmd.Name(), what))
		}
		return nil
	}
}

func maxArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usageError(fmt.Sprintf("%s takes at most %s, got %q", cmd.Name(), what, args))
		}
		return nil
	}
}

// quietClientGo silences client-go's own log (klog), which would otherwise print on stderr
// what vmctl reports itself, and noise such as a watch's reflector warning that its watch
// ended when vmctl stopped waiting on it (migrate --wait, drain).
func quietClientGo() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
}
