package launcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/vmlet/vmlet/internal/revert"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// step is one named step of a sequence; run registers its undo on the revert.Reverter.
type step struct {
	name string
	run  func(r *revert.Reverter) error
}

// runSteps runs the step list what in order; on failure it undoes the completed steps
// (newest first) and returns a *StepError naming the failed step.
func runSteps(l *Launcher, what string, steps []step) error {
	r := revert.New()
	defer r.Fail()
	for _, s := range steps {
		t0 := time.Now()
		if err := s.run(r); err != nil {
			l.log.Error("step failed", "what", what, "step", s.name, "err", err)
			return &StepError{What: what, Step: s.name, Err: err}
		}
		l.log.Debug("step done", "what", what, "step", s.name, "took", time.Since(t0))
	}
	r.Success()
	return nil
}

// startupSteps is the launcher's start: the agent sees StartingSocket during it and
// ReadySocket once the last step ran.
func (l *Launcher) startupSteps() []step {
	return []step{
		{"prepare-dirs", l.prepareDirs},
		{"open-qmp-log", l.openQMPLog},
		{"listen-api", l.listenAPI},
		{"serve-api", l.serveAPI},
		{"listen-taps", l.listenTaps},
		{"mark-ready", l.markReady},
	}
}

func (l *Launcher) startup() error { return runSteps(l, "start launcher", l.startupSteps()) }

func (l *Launcher) prepareDirs(r *revert.Reverter) error {
	// Sockets from a previous launcher in this run dir are stale: it is gone (the agent starts
	// one launcher per run dir), and a socket file would make bind fail.
	if err := removeSockets(l.paths); err != nil {
		return err
	}
	return l.paths.prepare()
}

func (l *Launcher) openQMPLog(r *revert.Reverter) error {
	q, err := openQMPLog(l.paths.QMPLog(), l.cfg.QMPLogMaxBytes, l.cfg.QMPLogKeep)
	if err != nil {
		return err
	}
	l.qlog = q
	r.Add(func() { q.close() })
	return nil
}

// listenAPI binds the command socket under its starting name, 0600 from the start (umask
// while binding, then chmod for good measure).
func (l *Launcher) listenAPI(r *revert.Reverter) error {
	lis, err := listenUnix(l.paths.StartingSocket())
	if err != nil {
		return err
	}
	l.lis = lis
	r.Add(func() { lis.Close(); os.Remove(l.paths.StartingSocket()) })
	return nil
}

func (l *Launcher) serveAPI(r *revert.Reverter) error {
	l.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(l.unaryErrors),
		grpc.ChainStreamInterceptor(l.streamErrors),
		grpc.MaxRecvMsgSize(4<<20),
	)
	pb.RegisterLauncherServer(l.srv, &api{Launcher: l})
	go func() { l.serveErr <- l.srv.Serve(l.lis) }()
	r.Add(func() { l.srv.Stop() })
	return nil
}

// listenTaps serves the tap hand-over socket (Paths.TapSocket) before the launcher is ready,
// so the agent can hand taps over as soon as it sees ReadySocket.
func (l *Launcher) listenTaps(r *revert.Reverter) error {
	lis, err := listenTaps(l.paths.TapSocket())
	if err != nil {
		return err
	}
	l.tapLis = lis
	go l.serveTaps(lis)
	r.Add(func() { lis.Close(); l.taps.closeAll(); l.dhcp.closeAll(); l.disks.closeAll() })
	return nil
}

func (l *Launcher) markReady(r *revert.Reverter) error {
	if err := os.Rename(l.paths.StartingSocket(), l.paths.ReadySocket()); err != nil {
		return fmt.Errorf("rename command socket: %w", err)
	}
	r.Add(func() { os.Remove(l.paths.ReadySocket()) })
	return nil
}

// apiDrainTimeout bounds how long teardown lets running RPCs (e.g. a Shutdown reply) finish.
const apiDrainTimeout = 5 * time.Second

// teardown undoes startup after the domain ended: the ready socket goes first (the agent sees
// the launcher is no longer ready), streams end, RPCs drain, sockets are removed.
func (l *Launcher) teardown() {
	os.Remove(l.paths.ReadySocket())
	if l.tapLis != nil {
		l.tapLis.Close()
	}
	l.taps.closeAll()
	l.dhcp.closeAll()
	l.disks.closeAll()
	l.events.close()
	l.qlog.feed.close()
	done := make(chan struct{})
	go func() { l.srv.GracefulStop(); close(done) }()
	t := time.NewTimer(apiDrainTimeout)
	select {
	case <-done:
	case <-t.C:
		l.log.Warn("api did not drain, stopping hard")
		l.srv.Stop()
		<-done
	}
	t.Stop()
	if err := l.qlog.close(); err != nil {
		l.log.Warn("close qmp log", "err", err)
	}
	if err := removeSockets(l.paths); err != nil {
		l.log.Warn("remove sockets", "err", err)
	}
}

// removeSockets removes the command socket (both names) and the sockets folder.
func removeSockets(p Paths) error {
	var errs []error
	for _, s := range []string{p.StartingSocket(), p.ReadySocket()} {
		if err := os.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(p.Sockets()); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove sockets: %w", err)
	}
	return nil
}

// listenUnix binds a unix stream socket readable only by the owner: umask 077 around bind
// closes the window in which the file would have the default mode.
func listenUnix(path string) (net.Listener, error) {
	old := syscall.Umask(0o077)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The launcher removes its sockets itself: the command socket is renamed after bind, and
	// Go's unlink-on-close would remove whatever sits at the old name.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		os.Remove(path)
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return lis, nil
}

func (l *Launcher) unaryErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		l.log.Debug("rpc failed", "method", info.FullMethod, "err", err)
	}
	return resp, toStatus(err)
}

func (l *Launcher) streamErrors(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return toStatus(h(srv, ss))
}
