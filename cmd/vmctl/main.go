package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

const usage = `usage: vmctl --launcher PATH COMMAND [ARGS]

Talks to one vmlet-launcher over its socket (PATH is <run dir>/launcher.sock).

commands:
  status [--json]            the domain's state, accelerator, QEMU version, devices
  pause | unpause            stop / resume the guest's vCPUs
  shutdown [--grace 30s]     ACPI power button, then quit after the grace period
  qmp '<json>'               one raw QMP command, e.g. '{"execute":"query-status"}'
  qmp-log [-f] [-n 50]       the QMP traffic log (-f: follow)
  console                    the serial console (Ctrl-] quits)
`

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vmctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	sock := fs.String("launcher", "", "the launcher's socket (<run dir>/launcher.sock)")
	timeout := fs.Duration("timeout", 30*time.Second, "deadline of one call (not of -f, console)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *sock == "" || fs.NArg() == 0 {
		fs.Usage()
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmd, rest := fs.Arg(0), fs.Args()[1:]
	c := &cli{sock: *sock, timeout: *timeout, stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.dispatch(ctx, cmd, rest)
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "vmctl: %v\n", err)
		fs.Usage()
		return exitUsage
	default:
		fmt.Fprintf(stderr, "vmctl: %v\n", err)
		return exitError
	}
}

type usageError string

func (e usageError) Error() string { return string(e) }

type cli struct {
	sock    string
	timeout time.Duration
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

func (c *cli) dispatch(ctx context.Context, cmd string, args []string) error {
	switch cmd {
	case "status":
		return c.status(ctx, args)
	case "pause", "unpause":
		return c.pause(ctx, cmd == "pause", args)
	case "shutdown":
		return c.shutdown(ctx, args)
	case "qmp":
		return c.qmp(ctx, args)
	case "qmp-log":
		return c.qmpLog(ctx, args)
	case "console":
		return c.console(ctx, args)
	}
	return usageError(fmt.Sprintf("unknown command %q", cmd))
}

// dial connects with the call deadline.
func (c *cli) dial(ctx context.Context) (*launcher.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return launcher.Dial(dctx, c.sock)
}

func noArgs(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return usageError(err.Error())
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Sprintf("%s: unexpected arguments %q", fs.Name(), fs.Args()))
	}
	return nil
}

func (c *cli) status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the Domain message as JSON")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	d, err := cl.GetDomain(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, EmitUnpopulated: false}.Marshal(d)
		if err != nil {
			return fmt.Errorf("encode domain: %w", err)
		}
		fmt.Fprintln(c.stdout, string(b))
		return nil
	}
	printDomain(c.stdout, d)
	return nil
}

func printDomain(w io.Writer, d *pb.Domain) {
	state := strings.TrimPrefix(d.GetState().String(), "STATE_")
	if d.GetReason() != "" {
		state += " (" + d.GetReason() + ")"
	}
	fmt.Fprintf(w, "name:    %s\nstate:   %s\n", d.GetName(), state)
	if d.GetState() == pb.State_STATE_NO_DOMAIN {
		return
	}
	fmt.Fprintf(w, "accel:   %s (%s)\nqemu:    %s pid %d\nmachine: %s cpu %s\nagent:   %v\n",
		d.GetAccel(), d.GetAccelReason(), d.GetQemuVersion(), d.GetPid(), d.GetMachine(), d.GetCpuModel(),
		map[bool]string{true: "connected", false: "not connected"}[d.GetAgentConnected()])
	fmt.Fprintf(w, "disks:   %s\nnics:    %s\n", strings.Join(d.GetDisks(), " "), strings.Join(d.GetNics(), " "))
	if m := d.GetMigration(); m != nil {
		fmt.Fprintf(w, "migration: %s %s\n", m.GetRole(), m.GetStatus())
	}
}

func (c *cli) pause(ctx context.Context, pause bool, args []string) error {
	if err := noArgs(flag.NewFlagSet(map[bool]string{true: "pause", false: "unpause"}[pause], flag.ContinueOnError), args); err != nil {
		return err
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var d *pb.Domain
	if pause {
		d, err = cl.Pause(ctx)
	} else {
		d, err = cl.Unpause(ctx)
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, strings.TrimPrefix(d.GetState().String(), "STATE_"))
	return nil
}

func (c *cli) shutdown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("shutdown", flag.ContinueOnError)
	grace := fs.Duration("grace", 0, "how long the guest may take to power off (0: the launcher's default)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The call lasts up to the grace period plus the quit/kill margin.
	ctx, cancel := context.WithTimeout(ctx, c.timeout+*grace+time.Minute)
	defer cancel()
	r, err := cl.Shutdown(ctx, *grace)
	if err != nil {
		return err
	}
	how := "guest powered off"
	if r.GetForced() {
		how = "forced"
	}
	fmt.Fprintf(c.stdout, "%s (%s)\n", how, r.GetReason())
	return nil
}

func (c *cli) qmp(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return usageError("qmp takes one JSON command, e.g. '{\"execute\":\"query-status\"}'")
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	reply, err := cl.QMP(ctx, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, reply)
	return nil
}

func (c *cli) qmpLog(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("qmp-log", flag.ContinueOnError)
	follow := fs.Bool("f", false, "follow: keep printing new entries")
	n := fs.Int("n", 50, "print the last n entries first")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	if !*follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	err = cl.QMPLog(ctx, *n, *follow, func(e *pb.QMPLogEntry) error {
		t := time.Unix(0, e.GetTimeUnixNano()).UTC().Format("15:04:05.000000")
		_, err := fmt.Fprintf(c.stdout, "%s %-5s %-6s %s\n", t, e.GetOrigin(), e.GetDirection(), e.GetText())
		return err
	})
	if *follow && errors.Is(err, context.Canceled) {
		return nil // ^C
	}
	return err
}
