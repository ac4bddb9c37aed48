package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// launcherCmds are the commands that only talk to one launcher, over --launcher (console, qmp,
// qmp-log, pause and unpause do too with --launcher: vmcmds.go).
func launcherCmds(c *cli) []*cobra.Command {
	var (
		asJSON bool
		grace  time.Duration
	)
	status := &cobra.Command{
		Use: "status [--json]", Short: "The domain's state, accelerator, QEMU version, devices", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.status(cmd.Context(), asJSON) },
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print the Domain message as JSON")
	shutdown := &cobra.Command{
		Use: "shutdown [--grace 30s]", Short: "ACPI power button, then quit after the grace period", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return c.shutdown(cmd.Context(), grace) },
	}
	shutdown.Flags().DurationVar(&grace, "grace", 0, "how long the guest may take to power off (0: the launcher's default)")
	cmds := []*cobra.Command{status, shutdown}
	for _, cmd := range cmds {
		cmd.PreRunE = func(*cobra.Command, []string) error {
			if c.sock == "" {
				return usageError("--launcher PATH is required (<run dir>/launcher.sock)")
			}
			return nil
		}
	}
	return cmds
}

// dial connects with the call deadline.
func (c *cli) dial(ctx context.Context) (*launcher.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return launcher.Dial(dctx, c.sock)
}

func (c *cli) status(ctx context.Context, asJSON bool) error {
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
	if asJSON {
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

func (c *cli) launcherPause(ctx context.Context, pause bool) error {
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

func (c *cli) shutdown(ctx context.Context, grace time.Duration) error {
	cl, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	// The call lasts up to the grace period plus the quit/kill margin.
	ctx, cancel := context.WithTimeout(ctx, c.timeout+grace+time.Minute)
	defer cancel()
	r, err := cl.Shutdown(ctx, grace)
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
