package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// Exit statuses (documented in the root command's help).
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
	exitBlocked  = 4
)

const exitCodesHelp = `Exit status: 0 done; 1 the call failed (for top: no agent answered, the API server
could not be reached, no node advertises metrics); 2 usage; 3 top NAME: no such VMI in the
metrics of the agents that answered; 4 drain: VMIs still on the node at --deadline.`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, newCLI(os.Stdin, os.Stdout, os.Stderr), os.Args[1:])
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
}

func newCLI(stdin io.Reader, stdout, stderr io.Writer) *cli {
	return &cli{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now, sleep: sleepCtx, http: &http.Client{}}
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
	root := newRootCmd(c)
	root.SetArgs(args)
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(c.stderr, "vmctl: %v\n", err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	case errors.Is(err, errNotFound):
		return exitNotFound
	case errors.Is(err, errBlocked):
		return exitBlocked
	}
	return exitError
}

type usageError string

func (e usageError) Error() string { return string(e) }

func newRootCmd(c *cli) *cobra.Command {
	root := &cobra.Command{
		Use:   "vmctl",
		Short: "The vmlet CLI",
		Long: `vmctl is the vmlet CLI.

"vmctl drain" and "vmctl uncordon" drain a node of its VMIs through the Kubernetes API.
"vmctl top" reads the node agents' metrics, found through the Kubernetes API (kubectl's
kubeconfig rules) or given with --metrics. The other commands talk to one vmlet-launcher
directly over its socket, the one the node agent uses: <run dir>/launcher.sock, where the run
dir is <--run-root>/<vmi uid> (/run/vmlet/<uid> in local mode) or <--launcher-root>/<vmi uid>
for launcher pods (/var/run/vmlet/launchers/<uid>); the uid is
kubectl get vmi NAME -o jsonpath='{.metadata.uid}'.

` + exitCodesHelp,
		Example: `  vmctl top -A
  vmctl top my-vm -n prod
  vmctl --launcher /run/vmlet/<uid>/launcher.sock status
  vmctl --launcher PATH qmp '{"execute":"query-status"}'
  vmctl --launcher PATH console            (Ctrl-] quits)`,
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
	pf.StringVar(&c.sock, "launcher", "", "the launcher's socket, <run dir>/launcher.sock (launcher commands)")
	pf.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline of one call: a launcher call (not qmp-log -f, console), one scrape, one API request")
	root.AddGroup(&cobra.Group{ID: "cluster", Title: "Cluster commands (kubeconfig, or --metrics):"})
	top := newTopCmd(c)
	top.GroupID = "cluster"
	root.AddCommand(top)
	for _, sub := range []*cobra.Command{newDrainCmd(c), newUncordonCmd(c)} {
		sub.GroupID = "cluster"
		root.AddCommand(sub)
	}
	root.AddGroup(&cobra.Group{ID: "launcher", Title: "Launcher commands (need --launcher):"})
	for _, sub := range launcherCmds(c) {
		sub.GroupID = "launcher"
		root.AddCommand(sub)
	}
	return root
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
