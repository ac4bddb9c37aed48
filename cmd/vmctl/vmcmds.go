package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
)

// byName is the help's paragraph on how a VMI is addressed.
const byName = `NAME is a VirtualMachineInstance in -n NAMESPACE (else the kubeconfig context's namespace,
else "default"), reached through the Kubernetes API server with kubectl's kubeconfig rules
and flags (--kubeconfig, $KUBECONFIG, --context, --token, ...) and the aggregated API
subresources.vmlet.dev/v1alpha1 (RBAC on virtualmachineinstances/<subresource> in that group).`

// vmCmds are the commands that address a VMI by name (and, for console, qmp, qmp-log, pause
// and unpause, a launcher socket with --launcher instead).
func vmCmds(c *cli) []*cobra.Command {
	return []*cobra.Command{
		newConsoleCmd(c), newVNCCmd(c), newQMPCmd(c), newQMPLogCmd(c),
		newPauseCmd(c, true), newPauseCmd(c, false), newMigrateCmd(c), newMigrateCancelCmd(c),
		newGuestInfoCmd(c, "guestosinfo", "guestosinfo", "The guest agent's view of the guest: OS, hostname, users, filesystems"),
		newGuestInfoCmd(c, "userlist", "userlist", "The users logged in to the guest (guest agent)"),
		newGuestInfoCmd(c, "fslist", "filesystemlist", "The guest's mounted filesystems and their use (guest agent)"),
		newPortForwardCmd(c), newSSHCmd(c),
	}
}

// nameOrLauncher checks the arguments of a command that takes NAME [extra...] by name, or
// only the extra arguments with --launcher.
func nameOrLauncher(c *cli, extraMin, extraMax int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		n := len(args)
		if c.sock == "" {
			n--
			if n < 0 {
				return usageError(fmt.Sprintf("%s takes a VMI NAME (or --launcher PATH)", cmd.Name()))
			}
		}
		if n < extraMin || n > extraMax {
			return usageError(fmt.Sprintf("%s takes %s", cmd.Name(), what))
		}
		return nil
	}
}

func newConsoleCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	cmd := &cobra.Command{
		Use:   "console NAME",
		Short: "The VM's serial console (Ctrl-] quits)",
		Long: `Connects the terminal to the VM's serial console (the console subresource, a websocket).
The terminal is put in raw mode (every key goes to the guest, ^C included) and restored on
the way out; Ctrl-] quits. The VM has one console client at a time: a new one takes over and
the old one is told ("console closed by the server: ...", exit 1).

` + byName + `

With --launcher PATH (as root on the node) it attaches to <run dir>/sockets/console.sock next
to the launcher socket instead, and takes no NAME.

` + exitCodesHelp,
		Example: `  vmctl console my-vm -n prod
  kubectl vmctl console my-vm
  vmctl --launcher /run/vmlet/<uid>/launcher.sock console`,
		Args: nameOrLauncher(c, 0, 0, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.sock != "" {
				return c.launcherConsole(cmd.Context())
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.vmiConsole(cmd.Context(), t)
		},
	}
	return vmiCmd(cmd, k)
}

func newVNCCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	var address string
	var port int
	cmd := &cobra.Command{
		Use:   "vnc NAME [--port 5900]",
		Short: "The VM's display on a local VNC port, for a viewer",
		Long: `Listens on --address:--port (127.0.0.1 and a free port by default) and relays each VNC
viewer that connects to the VM's display (the vnc subresource: RFB over a websocket), until
^C. It prints the port and the command to attach a viewer. The VM has one VNC client at a
time: a new viewer takes over. The VM has a display when its spec leaves
autoattachGraphicsDevice unset or true; without one the server answers 409 (exit 7).

"vmctl vnc screenshot NAME -o FILE" saves a PNG of the display instead.

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl vnc my-vm
  vmctl vnc my-vm --port 5901 &  vncviewer 127.0.0.1::5901
  vmctl vnc screenshot my-vm -o my-vm.png`,
		Args: exactArgs(1, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.vnc(cmd.Context(), t, fmt.Sprintf("%s:%d", address, port))
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "the local address to listen on")
	cmd.Flags().IntVar(&port, "port", 0, "the local port to listen on (0: a free one)")
	vmiCmd(cmd, k)
	cmd.AddCommand(newScreenshotCmd(c))
	return cmd
}

func newScreenshotCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	var out string
	cmd := &cobra.Command{
		Use:   "screenshot NAME -o FILE",
		Short: "Save a PNG of the VM's display",
		Long: `Saves a PNG of the VM's display (the vnc/screenshot subresource) in FILE ("-": stdout) and
prints its size.

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl vnc screenshot my-vm -o my-vm.png`,
		Args:    exactArgs(1, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return usageError("screenshot needs -o FILE (- for stdout)")
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.screenshot(cmd.Context(), t, out)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the PNG file to write (- for stdout)")
	vmiCmd(cmd, k)
	cmd.GroupID = ""
	return cmd
}

func newQMPCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	var historyPath string
	if home, err := os.UserHomeDir(); err == nil {
		historyPath = filepath.Join(home, ".vmctl_qmp_history")
	}
	cmd := &cobra.Command{
		Use:   "qmp NAME [COMMAND]",
		Short: "One raw QMP command, or an interactive QMP shell",
		Long: `With COMMAND, sends one QMP command to the VM's QEMU (POST to the qmp subresource) and
prints the reply pretty-printed; a QMP error reply is printed too and vmctl exits 5. COMMAND
is the JSON object ('{"execute":"query-status"}'), a bare command name (query-status), or a
name and its arguments as JSON ('device_del {"id":"disk1"}').

Without COMMAND it opens a QMP shell (the qmp subresource's websocket session): one command
per line in the same forms, replies pretty-printed, Tab completes command names (from
query-commands), Up/Down walk the history (kept in --history), "exit", Ctrl-D or Ctrl-C
leaves; "quit" is QEMU's quit (the VM ends, and the session). When stdin is not a terminal
the shell runs its lines as a script (exit 5 if a reply was an error).

Raw QMP can change anything in the VM: the qmp subresource needs the admin role, or the
command must be on the allow-list (for others the query-* family); a refused command is 403
(exit 6). Every command is recorded in the VM's QMP log with your user name (vmctl qmp-log).

` + byName + `

With --launcher PATH (as root on the node) the commands go to the launcher's QMP call
instead, and NAME is not given.

` + exitCodesHelp,
		Example: `  vmctl qmp my-vm query-status
  vmctl qmp my-vm '{"execute":"query-block"}'
  vmctl qmp my-vm                       (the QMP shell)
  echo query-status | vmctl qmp my-vm
  vmctl --launcher PATH qmp '{"execute":"query-status"}'`,
		Args: nameOrLauncher(c, 0, 1, "NAME and at most one COMMAND"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if c.sock != "" {
				q := launcherQMP{c}
				if len(args) == 1 {
					return c.qmpOnce(ctx, q, args[0])
				}
				return c.qmpShell(ctx, q, "launcher "+c.sock, historyPath)
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			if len(args) == 2 {
				return c.qmpOnce(ctx, postQMP{t}, args[1])
			}
			dctx, cancel := context.WithTimeout(ctx, c.timeout)
			s, err := t.sub.DialQMP(dctx, t.vmi)
			cancel()
			if err != nil {
				return explain(err)
			}
			defer s.Close()
			return c.qmpShell(ctx, s, "vmi "+t.vmi.String(), historyPath)
		},
	}
	cmd.Flags().StringVar(&historyPath, "history", historyPath, `the QMP shell's history file ("" keeps none)`)
	return vmiCmd(cmd, k)
}

func newQMPLogCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	var follow bool
	var tail int
	cmd := &cobra.Command{
		Use:   "qmp-log NAME [-f] [--tail 50]",
		Short: "The VM's QMP traffic log: every command, reply and event, with who sent it",
		Long: `Prints the VM's QMP log (the qmplog subresource; needs the admin role): one line per
command, reply or event, oldest first:

  TIME (UTC)      ORIGIN CALLER       DIR   JSON
  20:14:03.123456 api    alice        cmd   {"execute":"query-status"}

ORIGIN is who sent it (agent: the node agent; debug: the debug socket; api: the qmp
subresource), CALLER the API user. -f keeps printing new entries until ^C.

` + byName + `

With --launcher PATH (as root on the node) it reads the launcher's log instead, without NAME.

` + exitCodesHelp,
		Example: `  vmctl qmp-log my-vm --tail 20
  vmctl qmp-log my-vm -f
  vmctl --launcher PATH qmp-log -f`,
		Args: nameOrLauncher(c, 0, 0, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.sock != "" {
				return c.launcherQMPLog(cmd.Context(), follow, tail)
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.vmiQMPLog(cmd.Context(), t, follow, tail)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "follow: keep printing new entries")
	cmd.Flags().IntVar(&tail, "tail", 50, "print the last N entries first")
	cmd.Flags().IntVar(&tail, "lines", 50, "the same as --tail")
	_ = cmd.Flags().MarkHidden("lines")
	return vmiCmd(cmd, k)
}

func newPauseCmd(c *cli, pause bool) *cobra.Command {
	k := &kubeFlags{}
	verb, field := "pause", "true"
	short := "Pause the VM's vCPUs (spec.paused=true: kept until unpause)"
	if !pause {
		verb, field = "unpause", "false"
		short = "Resume the VM's vCPUs (spec.paused=false)"
	}
	cmd := &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Long: `Sets spec.paused=` + field + ` on the VMI with a merge patch (needs "patch
virtualmachineinstances" in its namespace): the node agent then ` + verb + `s the guest and
keeps it so (the Paused condition says when it did; kubectl get vmi NAME -o wide).

` + byName + `

With --launcher PATH (as root on the node) it calls the launcher's ` + verb + ` directly, without
NAME: that bypasses the VMI, and the node agent's next pass puts the guest back as
spec.paused says.

` + exitCodesHelp,
		Example: fmt.Sprintf(`  vmctl %s my-vm -n prod
  kubectl vmctl %s my-vm
  vmctl --launcher PATH %s`, verb, verb, verb),
		Args: nameOrLauncher(c, 0, 0, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if c.sock != "" {
				return c.launcherPause(cmd.Context(), pause)
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.setPaused(cmd.Context(), t, pause)
		},
	}
	return vmiCmd(cmd, k)
}

func newMigrateCmd(c *cli) *cobra.Command {
	o := &migrateOptions{}
	cmd := &cobra.Command{
		Use:   "migrate NAME [--wait [--deadline 10m]]",
		Short: "Live-migrate the VMI to another node (creates a VirtualMachineInstanceMigration)",
		Long: `Creates a VirtualMachineInstanceMigration (generateName NAME-migration-, spec.vmiName NAME)
and prints its name; the migration controller picks the target node. With --wait it prints
each phase until the migration ends: Succeeded (exit 0, with the nodes), Failed (exit 5,
with the reason), or still running at --deadline (exit 4; it goes on).

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl migrate my-vm
  vmctl migrate my-vm --wait --deadline 5m
  vmctl migrate-cancel my-vm`,
		Args: exactArgs(1, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := c.resolve(&o.kube, args[0])
			if err != nil {
				return err
			}
			return c.migrate(cmd.Context(), t, o)
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the migration ends")
	cmd.Flags().DurationVar(&o.deadline, "deadline", 10*time.Minute, "with --wait: give up waiting after this long (0: never)")
	return vmiCmd(cmd, &o.kube)
}

func newMigrateCancelCmd(c *cli) *cobra.Command {
	o := &migrateOptions{}
	cmd := &cobra.Command{
		Use:   "migrate-cancel NAME [--wait]",
		Short: "Cancel the VMI's migration (deletes its migrations that have not ended)",
		Long: `Deletes every VirtualMachineInstanceMigration of the VMI that has not ended (phase neither
Succeeded nor Failed) and prints each: the migration controller aborts one in progress and
the guest stays on its node. No such migration: exit 3. With --wait it waits until they are
gone (the abort has ended), up to --deadline (then exit 4).

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl migrate-cancel my-vm
  vmctl migrate-cancel my-vm --wait --deadline 1m`,
		Args: exactArgs(1, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := c.resolve(&o.kube, args[0])
			if err != nil {
				return err
			}
			return c.migrateCancel(cmd.Context(), t, o)
		},
	}
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait until the cancelled migrations are gone")
	cmd.Flags().DurationVar(&o.deadline, "deadline", 10*time.Minute, "with --wait: give up waiting after this long (0: never)")
	return vmiCmd(cmd, &o.kube)
}

func newPortForwardCmd(c *cli) *cobra.Command {
	k := &kubeFlags{}
	var address string
	cmd := &cobra.Command{
		Use:   "port-forward NAME LOCAL:GUEST",
		Short: "Forward a local TCP port to a port of the guest",
		Long: `Listens on --address:LOCAL (127.0.0.1 by default; LOCAL 0 picks a free port, PORT alone
means PORT:PORT) and relays each TCP connection to the guest's port GUEST through its own
websocket (the portforward/GUEST subresource), until ^C. The guest's address is the VMI's own:
no Service is needed.

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl port-forward my-vm 8080:80
  curl http://127.0.0.1:8080/`,
		Args: exactArgs(2, "a VMI NAME and LOCAL:GUEST"),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, guest, err := parsePorts(args[1])
			if err != nil {
				return err
			}
			t, err := c.resolve(k, args[0])
			if err != nil {
				return err
			}
			return c.portForward(cmd.Context(), t, address, local, guest)
		},
	}
	cmd.Flags().StringVar(&address, "address", "127.0.0.1", "the local address to listen on")
	return vmiCmd(cmd, k)
}

func newSSHCmd(c *cli) *cobra.Command {
	o := &sshOptions{}
	cmd := &cobra.Command{
		Use:   "ssh [USER@]NAME [-l USER] [--port 22] [-- SSH-ARGS...]",
		Short: "ssh into the guest through a port-forward",
		Long: `Forwards a free 127.0.0.1 port to the guest's port 22 (as port-forward) and runs the
system's ssh against it:

  ssh -p PORT -o HostKeyAlias=vmi.NAME.NAMESPACE [-l USER] 127.0.0.1 SSH-ARGS...

HostKeyAlias keeps one known_hosts entry per VMI whatever the local port. SSH-ARGS (after
--) are ssh's: options, then a remote command. vmctl exits with ssh's exit status once ssh
runs.

` + byName + `

` + exitCodesHelp,
		Example: `  vmctl ssh debian@my-vm
  vmctl ssh my-vm -l root -- -i ~/.ssh/id_ed25519 uname -a`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usageError("ssh takes [USER@]NAME")
			}
			if d := cmd.ArgsLenAtDash(); d > 1 || (d == -1 && len(args) > 1) {
				return usageError("ssh takes [USER@]NAME, then ssh's arguments after --")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, login := splitUser(args[0], o.user)
			t, err := c.resolve(&o.kube, name)
			if err != nil {
				return err
			}
			return c.ssh(cmd.Context(), t, o, login, args[1:])
		},
	}
	cmd.Flags().StringVarP(&o.user, "login", "l", "", "the user to log in as (ssh -l)")
	cmd.Flags().IntVar(&o.port, "port", 22, "the guest's ssh port")
	return vmiCmd(cmd, &o.kube)
}

// guestInfo flags.
type guestInfoOptions struct {
	kube   kubeFlags
	output string
}

func newGuestInfoCmd(c *cli, verb, sub, short string) *cobra.Command {
	o := &guestInfoOptions{}
	cmd := &cobra.Command{
		Use:   verb + " NAME [-o json|table]",
		Short: short,
		Long: short + `, live from the guest agent (the ` + sub + ` subresource;
KubeVirt's shape). -o json (the default) prints the answer as the server sent it, indented;
-o table a summary. The guest needs qemu-guest-agent running (else 409, exit 7).

` + byName + `

` + exitCodesHelp,
		Example: fmt.Sprintf(`  vmctl %s my-vm
  vmctl %s my-vm -o table`, verb, verb),
		Args: exactArgs(1, "one VMI NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := c.resolve(&o.kube, args[0])
			if err != nil {
				return err
			}
			return c.guestInfo(cmd.Context(), t, sub, o.output)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "json", "json or table")
	return vmiCmd(cmd, &o.kube)
}
