package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/network/dhcp"
)

// maxHandedFiles bounds the files of one hand-over message: the queues of a tap and its
// counters file (or the three sockets of a DHCP service, or the files of a disk image).
const maxHandedFiles = 65

// handoffRequest is one hand-over message, of one of four kinds:
//   - Tap: its SCM_RIGHTS carry Queues tap queue files, then, with Counters, a file of
//     /proc/net/dev opened inside the tap's network namespace (a /proc/net file keeps showing
//     the namespace it was opened in, so an unprivileged launcher can read the tap's counters
//     without entering it);
//   - DHCP: an interface's lease plan; its SCM_RIGHTS carry the sockets the agent bound for it
//     in the pod's netns (dhcp.ListenDHCP), which the launcher serves;
//   - StopDHCP: the interface whose DHCP service to stop; no files;
//   - Disk: a disk id; its SCM_RIGHTS carry open files of the disk's image (diskfiles_linux.go).
type handoffRequest struct {
	Tap      string          `json:"tap,omitempty"`
	Queues   int             `json:"queues,omitempty"`
	Counters bool            `json:"counters,omitempty"`
	DHCP     *dhcp.LeasePlan `json:"dhcp,omitempty"`
	StopDHCP string          `json:"stopDhcp,omitempty"`
	Disk     string          `json:"disk,omitempty"`
}

type handoffReply struct {
	Error string `json:"error,omitempty"`
}

// handedTap is what the agent handed over for one tap.
type handedTap struct {
	queues   []*os.File // taken by the next start or hotplug that uses the tap
	counters *os.File   // kept while the launcher runs
}

// tapPool holds the tap files handed over, by tap name.
type tapPool struct {
	mu   sync.Mutex
	taps map[string]*handedTap
}

// put stores t for name, closing what an earlier hand-over of name left.
func (p *tapPool) put(name string, t *handedTap) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.taps == nil {
		p.taps = map[string]*handedTap{}
	}
	if old := p.taps[name]; old != nil {
		closeFiles(old.queues)
		if t.counters == nil {
			t.counters = old.counters
		} else if old.counters != nil {
			old.counters.Close()
		}
	}
	p.taps[name] = t
}

// take returns the handed queue files of name if there are exactly queues of them; the
// caller owns them.
func (p *tapPool) take(name string, queues int) ([]*os.File, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.taps[name]
	if t == nil || len(t.queues) != queues {
		return nil, false
	}
	files := t.queues
	t.queues = nil
	return files, true
}

// netDev reads name's counters from its handed /proc/net/dev file; false if none was handed.
func (p *tapPool) netDev(name string) (netDev, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.taps[name]
	if t == nil || t.counters == nil {
		return netDev{}, false, nil
	}
	b := make([]byte, 64<<10)
	n, err := t.counters.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return netDev{}, true, fmt.Errorf("read net counters: %w", err)
	}
	c, err := parseNetDev(b[:n], name)
	return c, true, err
}

func (p *tapPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, t := range p.taps {
		closeFiles(t.queues)
		if t.counters != nil {
			t.counters.Close()
		}
	}
	p.taps = nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// listenTaps binds the hand-over socket (SOCK_SEQPACKET: one message per hand-over), 0600.
func listenTaps(path string) (*net.UnixListener, error) {
	old := unix.Umask(0o077)
	lis, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	return lis, nil
}

// serveTaps accepts hand-overs until lis is closed.
func (l *Launcher) serveTaps(lis *net.UnixListener) {
	for {
		c, err := lis.AcceptUnix()
		if err != nil {
			return
		}
		go l.serveTapConn(c)
	}
}

func (l *Launcher) serveTapConn(c *net.UnixConn) {
	defer c.Close()
	if err := checkPeer(c); err != nil {
		l.log.Warn("tap hand-over refused", "err", err)
		return
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(maxHandedFiles*4))
	for {
		n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		files, ferr := parseRights(oob[:oobn])
		reply := handoffReply{}
		if err := l.accept(buf[:n], files, ferr); err != nil {
			reply.Error = err.Error()
			closeFiles(files)
		}
		b, _ := json.Marshal(reply)
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// accept takes one hand-over message; on error the caller closes files.
func (l *Launcher) accept(msg []byte, files []*os.File, ferr error) error {
	if ferr != nil {
		return ferr
	}
	var req handoffRequest
	if err := json.Unmarshal(msg, &req); err != nil {
		return fmt.Errorf("hand over: %w: %w", ErrInvalidRequest, err)
	}
	switch {
	case req.DHCP != nil:
		return l.acceptDHCP(req.DHCP, files)
	case req.StopDHCP != "":
		if len(files) > 0 {
			return fmt.Errorf("stop dhcp of %s: %w: %d files", req.StopDHCP, ErrInvalidRequest, len(files))
		}
		return l.dhcp.stop(req.StopDHCP)
	case req.Disk != "":
		return l.acceptDisk(req, files)
	}
	return l.acceptTap(req, files)
}

// acceptTap checks one tap hand-over (each queue file is a tap attached to the named device)
// and pools it.
func (l *Launcher) acceptTap(req handoffRequest, files []*os.File) error {
	want := req.Queues
	if req.Counters {
		want++
	}
	if req.Tap == "" || req.Queues < 1 || len(files) != want {
		return fmt.Errorf("hand over tap %q: %w: %d files for %d queues (counters %v)", req.Tap, ErrInvalidRequest, len(files), req.Queues, req.Counters)
	}
	t := &handedTap{queues: files[:req.Queues]}
	for q, f := range t.queues {
		name, err := tapName(f)
		if err != nil {
			return fmt.Errorf("hand over tap %s: %w: queue %d: %w", req.Tap, ErrInvalidRequest, q, err)
		}
		if name != req.Tap {
			return fmt.Errorf("hand over tap %s: %w: queue %d is a queue of %q", req.Tap, ErrInvalidRequest, q, name)
		}
	}
	if req.Counters {
		t.counters = files[req.Queues]
	}
	l.taps.put(req.Tap, t)
	return nil
}

// tapName is the device a tap queue file is attached to (TUNGETIFF).
func tapName(f *os.File) (string, error) {
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return "", err
	}
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNGETIFF, ifr); err != nil {
		return "", fmt.Errorf("get tap name: %w", err)
	}
	return ifr.Name(), nil
}

// checkPeer lets only root (the node agent) and the launcher's own user hand files over.
func checkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("peer credentials: %w", cerr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("peer uid %d is neither root nor %d", cred.Uid, os.Getuid())
	}
	return nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("hand over tap: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "handed"))
		}
	}
	return files, nil
}

// HandOverTap gives the launcher serving socket (its Paths.TapSocket) the queue files of tap
// name, and optionally a /proc/net/dev file opened in the tap's namespace: its next start or
// NIC hotplug using that tap takes them instead of opening /dev/net/tun itself. The caller
// keeps its copies (close them after). Equivalent to sendmsg(SCM_RIGHTS) of the fds.
func HandOverTap(ctx context.Context, socket, name string, queues []*os.File, counters *os.File) error {
	files := slices.Clone(queues)
	if counters != nil {
		files = append(files, counters)
	}
	req := handoffRequest{Tap: name, Queues: len(queues), Counters: counters != nil}
	if err := handOver(ctx, socket, req, files); err != nil {
		return fmt.Errorf("hand over tap %s: %w", name, err)
	}
	return nil
}

// handOver sends one hand-over message with files and waits for the launcher's answer.
func handOver(ctx context.Context, socket string, req handoffRequest, files []*os.File) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		return err
	}
	defer c.Close()
	uc := c.(*net.UnixConn)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(handOverTimeout)
	}
	_ = uc.SetDeadline(deadline)
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	fds := make([]int, 0, len(files))
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := uc.WriteMsgUnix(b, oob, nil); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := uc.Read(buf)
	if err != nil {
		return err
	}
	var rep handoffReply
	if err := json.Unmarshal(buf[:n], &rep); err != nil {
		return err
	}
	if rep.Error != "" {
		return fmt.Errorf("%w: %s", ErrInvalidRequest, rep.Error)
	}
	return nil
}
