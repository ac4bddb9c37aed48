package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// qemuConf is libvirt's QEMU driver configuration: KubeVirt's virt-launcher qemu.conf
// (cmd/virt-launcher/qemu.conf) minus what session mode ignores (user, group, ownership):
// QEMU's stdio goes through virtlogd, no private /dev namespace, no cgroup controllers.
const qemuConf = `stdio_handler = "logd"
namespaces = [ ]
cgroup_controllers = [ ]
`

// libvirtStack is libvirtd + virtlogd in session mode as nobody, every folder under dir:
// XDG_CONFIG_HOME (qemu.conf), XDG_RUNTIME_DIR (sockets, pid files), XDG_CACHE_HOME (QEMU
// logs, capabilities cache). Nothing outside dir is read or written but the binaries.
type libvirtStack struct {
	dir      string
	virtlogd *exec.Cmd
	reaper   *exec.Cmd // sidebyside reap -- libvirtd
	done     map[*exec.Cmd]chan struct{}
	conn     *libvirt.Libvirt
	version  string
}

func (s *libvirtStack) env() []string {
	return []string{
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"LC_ALL=C",
		"HOME=" + filepath.Join(s.dir, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(s.dir, "config"),
		"XDG_RUNTIME_DIR=" + filepath.Join(s.dir, "run"),
		"XDG_CACHE_HOME=" + filepath.Join(s.dir, "cache"),
		"XDG_DATA_HOME=" + filepath.Join(s.dir, "data"),
	}
}

func (s *libvirtStack) socket() string { return filepath.Join(s.dir, "run", "libvirt", "libvirt-sock") }
func (s *libvirtStack) logdSocket() string {
	return filepath.Join(s.dir, "run", "libvirt", "virtlogd-sock")
}
func (s *libvirtStack) libvirtdPidFile() string { return filepath.Join(s.dir, "run", "libvirtd.pid") }
func (s *libvirtStack) virtlogdPidFile() string { return filepath.Join(s.dir, "run", "virtlogd.pid") }

// QEMULog is libvirt's log of a domain (its QEMU command line first).
func (s *libvirtStack) QEMULog(name string) string {
	return filepath.Join(s.dir, "cache", "libvirt", "qemu", "log", name+".log")
}

// startLibvirt writes the configuration, starts virtlogd and then libvirtd (under the reaper),
// waits for their sockets and connects to libvirtd (qemu:///session). The first start probes
// QEMU's capabilities (≈5–12 s here); stop undoes everything.
func startLibvirt(ctx context.Context, dir, self string) (s *libvirtStack, err error) {
	s = &libvirtStack{dir: dir, done: map[*exec.Cmd]chan struct{}{}}
	defer func() {
		if err != nil {
			s.stop(context.WithoutCancel(ctx))
		}
	}()
	for _, d := range []string{"home", "config", "config/libvirt", "run", "cache", "data"} {
		if err := mkdirNobody(filepath.Join(dir, d)); err != nil {
			return s, err
		}
	}
	if err := writeNobody(filepath.Join(dir, "config/libvirt/qemu.conf"), qemuConf); err != nil {
		return s, err
	}
	s.virtlogd, err = s.spawn("virtlogd", "virtlogd", "--pid-file="+s.virtlogdPidFile())
	if err != nil {
		return s, err
	}
	if err := waitSocket(ctx, s.logdSocket(), s.done[s.virtlogd]); err != nil {
		return s, fmt.Errorf("start virtlogd: %w (log %s)", err, filepath.Join(dir, "virtlogd.log"))
	}
	s.reaper, err = s.spawn("libvirtd", self, "reap", "--", "libvirtd", "--pid-file="+s.libvirtdPidFile())
	if err != nil {
		return s, err
	}
	if err := waitSocket(ctx, s.socket(), s.done[s.reaper]); err != nil {
		return s, fmt.Errorf("start libvirtd: %w (log %s)", err, filepath.Join(dir, "libvirtd.log"))
	}
	l := libvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(s.socket()), dialers.WithLocalTimeout(10*time.Second)))
	if err := lvDo(ctx, l, "connect to libvirtd", func() error { return l.ConnectToURI(libvirt.QEMUSession) }); err != nil {
		return s, err
	}
	s.conn = l
	var v uint64
	if err := lvDo(ctx, l, "get libvirt version", func() (err error) { v, err = l.ConnectGetLibVersion(); return err }); err != nil {
		return s, err
	}
	s.version = fmt.Sprintf("%d.%d.%d", v/1000000, v/1000%1000, v%1000)
	return s, nil
}

// spawn starts a daemon as nobody with the stack's environment, its output in dir/NAME.log.
func (s *libvirtStack) spawn(name, bin string, args ...string) (*exec.Cmd, error) {
	log, err := os.Create(filepath.Join(s.dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("create %s log: %w", name, err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = s.env(), log, log, s.dir
	asNobody(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }() // the exit status is in cmd.ProcessState
	s.done[cmd] = done
	return cmd, nil
}

// daemonPIDs are the processes that make up libvirt's control plane here: libvirtd and
// virtlogd (the reaper is this harness's, not libvirt's, and is not counted).
func (s *libvirtStack) daemonPIDs() ([]int, error) {
	d, err := readPidFile(s.libvirtdPidFile())
	if err != nil {
		return nil, err
	}
	return []int{d, s.virtlogd.Process.Pid}, nil
}

// stop disconnects, stops libvirtd (SIGTERM through the reaper, which kills and reaps any QEMU
// left) and virtlogd, each bounded by 30 s and then killed.
func (s *libvirtStack) stop(ctx context.Context) []error {
	var errs []error
	if s.conn != nil {
		_ = s.conn.Disconnect() // the daemon goes next anyway
	}
	for _, c := range []*exec.Cmd{s.reaper, s.virtlogd} {
		if c == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGTERM) // it may have exited: the wait below tells
		t := time.NewTimer(30 * time.Second)
		select {
		case <-s.done[c]:
		case <-t.C:
			errs = append(errs, fmt.Errorf("stop %s: still running after 30 s: killed", c.Path))
			_ = c.Process.Kill()
			<-s.done[c]
		}
		t.Stop()
	}
	return errs
}

// waitSocket waits until something accepts connections on path, the process behind it exits
// (exited closes) or ctx ends. The daemons create their sockets in folders they create
// themselves, so this re-checks every 20 ms rather than watching with inotify.
func waitSocket(ctx context.Context, path string, exited <-chan struct{}) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("wait for socket %s: the daemon exited", path)
		case <-ctx.Done():
			return fmt.Errorf("wait for socket %s: %w", path, ctx.Err())
		case <-tick.C:
		}
	}
}

// errLibvirtTimeout means a libvirt call outlived its context; the connection was closed to
// abort it (go-libvirt calls take no context).
var errLibvirtTimeout = errors.New("libvirt call timed out")

// lvDo runs one go-libvirt call bounded by ctx: if ctx ends first, the connection is closed,
// which fails the call, and the error says so.
func lvDo(ctx context.Context, l *libvirt.Libvirt, what string, call func() error) error {
	res := make(chan error, 1)
	go func() { res <- call() }()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	case <-ctx.Done():
		_ = l.Disconnect() // aborts the call; the connection is unusable from here on
		callErr := <-res   // the disconnect's doing; joined after ctx's reason
		return errors.Join(fmt.Errorf("%s: %w: %w", what, errLibvirtTimeout, ctx.Err()), callErr)
	}
}

// mkdirNobody creates dir (and parents) 0755 owned by nobody.
func mkdirNobody(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create dir: %w", err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		return fmt.Errorf("chown dir: %w", err)
	}
	return nil
}

// writeNobody writes a 0644 file owned by nobody.
func writeNobody(path, content string) error {
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return fmt.Errorf("write file: %w", err)
	}
	if err := os.Chown(path, nobody, nobody); err != nil {
		return fmt.Errorf("chown file: %w", err)
	}
	return nil
}
