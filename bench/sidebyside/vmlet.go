package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/test/logbuf"
)

// vmletStack starts a vmlet-launcher (as nobody, its run dir under dir) per VM and drives it
// with launcher.Client.
type vmletStack struct {
	bin string // vmlet-launcher, readable and executable by nobody
	dir string
}

func (s *vmletStack) name() string { return modeVmlet }

// launcherProc is one running vmlet-launcher.
type launcherProc struct {
	cmd    *exec.Cmd
	paths  launcher.Paths
	client *launcher.Client
	stderr *logbuf.Buffer
	done   chan struct{}
	spec   *pb.DomainSpec
	qemu   int
}

func (s *vmletStack) prepare(ctx context.Context, g Guest) (pending, error) {
	return s.spawn(ctx, "l-"+g.Name, g.Name, g.LauncherSpec())
}

// spawn starts a launcher for a domain called name and connects to it once its API socket is
// ready (launcher start is not part of any measurement: the agent starts it ahead).
func (s *vmletStack) spawn(ctx context.Context, dirName, name string, spec *pb.DomainSpec) (*launcherProc, error) {
	runDir := filepath.Join(s.dir, dirName)
	if err := mkdirNobody(runDir); err != nil {
		return nil, err
	}
	p := &launcherProc{paths: launcher.Paths{Root: runDir}, stderr: &logbuf.Buffer{}, done: make(chan struct{}), spec: spec}
	p.cmd = exec.Command(s.bin, "--run-dir", runDir, "--name", name)
	p.cmd.Stderr = p.stderr
	asNobody(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start launcher: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }() // the exit code is not needed: stop checks the process is gone
	if err := waitSocket(ctx, p.paths.ReadySocket(), p.done); err != nil {
		p.kill()
		return nil, fmt.Errorf("start launcher: %w\n%s", err, p.stderr.String())
	}
	c, err := launcher.Dial(ctx, p.paths.ReadySocket())
	if err != nil {
		p.kill()
		return nil, err
	}
	p.client = c
	return p, nil
}

func (p *launcherProc) start(ctx context.Context) (vm, error) {
	r, err := p.client.Sync(ctx, p.spec)
	if err != nil {
		return nil, fmt.Errorf("sync: %w\n%s", err, p.stderr.String())
	}
	if st := r.GetDomain().GetState(); st != pb.State_STATE_RUNNING {
		return nil, fmt.Errorf("sync: domain %s after sync, want running", st)
	}
	p.qemu = int(r.GetDomain().GetPid())
	return p, nil
}

func (p *launcherProc) discard(ctx context.Context) error { return p.stop(ctx) }

func (p *launcherProc) console() string { return p.paths.ConsoleSocket() }

func (p *launcherProc) pause(ctx context.Context) error {
	_, err := p.client.Pause(ctx)
	return err
}

func (p *launcherProc) resume(ctx context.Context) error {
	_, err := p.client.Unpause(ctx)
	return err
}

func (p *launcherProc) state(ctx context.Context) error {
	_, err := p.client.GetDomain(ctx)
	return err
}

func (p *launcherProc) qemuPID() int       { return p.qemu }
func (p *launcherProc) controlPIDs() []int { return []int{p.cmd.Process.Pid} }

// stop kills the domain (Kill RPC) and waits for the launcher and QEMU to exit; a launcher
// without a domain gets SIGTERM. Last resort after 30 s: SIGKILL.
func (p *launcherProc) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case <-p.done:
	default:
		if d, err := p.client.GetDomain(ctx); err == nil && d.GetState() != pb.State_STATE_NO_DOMAIN {
			_ = p.client.Kill(ctx) // checked by waiting for the exit below
		} else {
			_ = p.cmd.Process.Signal(syscall.SIGTERM) // as above
		}
	}
	var err error
	select {
	case <-p.done:
	case <-ctx.Done():
		err = fmt.Errorf("stop launcher: %w\n%s", ctx.Err(), p.stderr.String())
		p.kill()
	}
	if p.client != nil {
		p.client.Close()
	}
	if p.qemu > 0 {
		if werr := waitPidGone(ctx, p.qemu); werr != nil {
			err = fmt.Errorf("qemu outlived its launcher: %w", werr)
			_ = killAndWait(context.WithoutCancel(ctx), p.qemu)
		}
	}
	return err
}

func (p *launcherProc) kill() {
	_ = p.cmd.Process.Kill() // it may be gone already
	<-p.done
}
