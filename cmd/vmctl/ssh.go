package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// sshOptions are ssh's flags.
type sshOptions struct {
	kube kubeFlags
	user string
	port int
}

// splitUser reads [USER@]NAME.
func splitUser(arg, user string) (name, login string) {
	if u, n, ok := strings.Cut(arg, "@"); ok {
		return n, u
	}
	return arg, user
}

// ssh forwards a free 127.0.0.1 port to the guest's port o.port and runs the system's ssh
// against it: ssh -p PORT -o HostKeyAlias=vmi.NAME.NAMESPACE [-l USER] 127.0.0.1 ARGS...
// HostKeyAlias keeps one known_hosts entry per VMI whatever the local port. ssh's exit status
// is vmctl's.
func (c *cli) ssh(ctx context.Context, t *vmTarget, o *sshOptions, login string, args []string) error {
	path, err := c.lookPath("ssh")
	if err != nil {
		return fmt.Errorf("ssh: %w (install an OpenSSH client)", err)
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	l, err := listenLocal(fctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() {
		served <- c.serveForward(fctx, l, func(ctx context.Context) (*subresclient.Stream, error) {
			return t.sub.PortForward(ctx, t.vmi, o.port)
		})
	}()
	argv := []string{"-p", strconv.Itoa(l.Addr().(*net.TCPAddr).Port),
		"-o", "HostKeyAlias=vmi." + t.vmi.Name + "." + t.vmi.Namespace}
	if login != "" {
		argv = append(argv, "-l", login)
	}
	// OpenSSH reads options after the destination too: ARGS may be options, then a command.
	argv = append(argv, "127.0.0.1")
	argv = append(argv, args...)
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	err = cmd.Run()
	stop()
	if ferr := <-served; ferr != nil && err == nil {
		return ferr
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitStatusError{code: ee.ExitCode(), err: fmt.Errorf("ssh: %w", err), quiet: true}
	}
	if err != nil {
		return fmt.Errorf("ssh: %w", err)
	}
	return nil
}
