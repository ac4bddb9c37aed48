package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu"
	"github.com/vmlet/vmlet/qemu/accel"
	"github.com/vmlet/vmlet/test/logbuf"
)

// bareMode execs QEMU itself with vmlet's command line (qemu.BuildArgv, without -S) and talks
// raw QMP: the floor under both stacks.
type bareMode struct {
	dir string
	// machine is the emulator's versioned q35 machine, for migratable guests.
	machine string
}

func (m *bareMode) name() string { return modeBare }

type barePending struct {
	g         Guest
	args      []string
	listeners []*os.File // QMP, console, agent: listening sockets QEMU inherits as fds 3, 4, 5
}

type bareVM struct {
	g      Guest
	cmd    *exec.Cmd
	qmp    *rawQMP
	stderr *logbuf.Buffer
	done   chan struct{}
}

// bareOptions change the command line for migration.
type bareOptions struct {
	migratable bool // named CPU model and versioned machine (qemu.Spec.Migratable)
	incoming   bool // -incoming defer
}

func (m *bareMode) prepare(ctx context.Context, g Guest) (pending, error) {
	return m.prepareWith(g, bareOptions{})
}

func (m *bareMode) prepareWith(g Guest, o bareOptions) (*barePending, error) {
	g, err := guestFor(g, m.dir)
	if err != nil {
		return nil, err
	}
	spec := g.QEMUSpec()
	spec.Migratable, spec.Incoming = o.migratable, o.incoming
	if o.migratable {
		spec.CPU.Model = "" // the migratable default (qemu64), as the launcher picks it
	}
	env := qemu.Env{
		Accel:          accel.Decision{Accel: accel.TCG, Reason: "benchmark: TCG in every mode"},
		DefaultMachine: m.machine,
		FDs:            qemu.FDs{QMP: 3, Serial: 4, Agent: 5},
	}
	args, err := qemu.BuildArgv(spec, env)
	if err != nil {
		return nil, fmt.Errorf("build bare qemu argv: %w", err)
	}
	p := &barePending{g: g, args: withoutFreeze(args)}
	for _, path := range []string{g.QMPSocket, g.ConsoleSocket, g.AgentSocket} {
		f, err := listenUnix(path)
		if err != nil {
			p.closeListeners()
			return nil, err
		}
		p.listeners = append(p.listeners, f)
	}
	return p, nil
}

// listenUnix binds a listening unix socket at path and returns it as a file for a child.
func listenUnix(path string) (*os.File, error) {
	_ = os.Remove(path) // a stale socket of an earlier run
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false) // the path stays for clients; the folder is removed at the end
	f, err := l.File()
	l.Close()
	if err != nil {
		return nil, fmt.Errorf("get fd of %s: %w", path, err)
	}
	return f, nil
}

func (p *barePending) closeListeners() {
	for _, f := range p.listeners {
		f.Close()
	}
}

func (p *barePending) discard(context.Context) error { p.closeListeners(); return nil }

// start execs QEMU, completes the QMP handshake and checks query-status says running.
func (p *barePending) start(ctx context.Context) (vm, error) { return p.startBare(ctx, "running") }

func (p *barePending) startBare(ctx context.Context, want string) (*bareVM, error) {
	defer p.closeListeners() // QEMU has its copies
	v := &bareVM{g: p.g, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	v.cmd = exec.Command("qemu-system-x86_64", p.args...)
	v.cmd.ExtraFiles = p.listeners
	v.cmd.Stderr = v.stderr
	asNobody(v.cmd)
	if err := v.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	go func() { _ = v.cmd.Wait(); close(v.done) }() // exit status unused: stop only needs it gone
	q, err := dialRawQMP(ctx, p.g.QMPSocket)
	if err == nil {
		v.qmp = q
		var st string
		if st, err = q.status(ctx); err == nil && st != want {
			err = fmt.Errorf("start qemu: status %s, want %s", st, want)
		}
	}
	if err != nil {
		v.kill()
		return nil, fmt.Errorf("%w\n%s", err, v.stderr.String())
	}
	return v, nil
}

func (v *bareVM) console() string { return v.g.ConsoleSocket }

func (v *bareVM) pause(ctx context.Context) error {
	_, err := v.qmp.run(ctx, "stop", nil)
	return err
}

func (v *bareVM) resume(ctx context.Context) error {
	_, err := v.qmp.run(ctx, "cont", nil)
	return err
}

func (v *bareVM) state(ctx context.Context) error {
	_, err := v.qmp.status(ctx)
	return err
}

func (v *bareVM) qemuPID() int       { return v.cmd.Process.Pid }
func (v *bareVM) controlPIDs() []int { return nil }

// stop sends QMP quit and waits for QEMU to exit (killed after 30 s).
func (v *bareVM) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-v.done:
	default:
		_, _ = v.qmp.run(ctx, "quit", nil) // QEMU may close the socket before replying
	}
	v.qmp.close()
	select {
	case <-v.done:
		return nil
	case <-ctx.Done():
		v.kill()
		return fmt.Errorf("stop qemu: %w", ctx.Err())
	}
}

func (v *bareVM) kill() {
	_ = v.cmd.Process.Signal(syscall.SIGKILL) // may be gone already
	<-v.done
	if v.qmp != nil {
		v.qmp.close()
	}
}
