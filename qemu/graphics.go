package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoDisplay is the error of display calls (Screendump) on a VM without Graphics.
var ErrNoDisplay = errors.New("no display")

// vncHandoffTimeout bounds handing one accepted VNC client to QEMU (getfd + add_client).
const vncHandoffTimeout = 10 * time.Second

// serveVNC binds the VNC socket and hands every client that connects to QEMU's VNC server
// until QEMU exits. The socket is vmlet's (0600, removed with the VM's other sockets), so QEMU
// never creates a path or listens on a network address.
func (s *starter) serveVNC(context.Context) error {
	g := s.spec.Graphics
	if g == nil {
		return nil
	}
	f, err := listenUnix(g.Socket)
	if err != nil {
		return fmt.Errorf("serve vnc: %w", err)
	}
	s.vm.files = append(s.vm.files, g.Socket)
	lis, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("serve vnc: %w", err)
	}
	v := &vncServer{vm: s.vm, lis: lis}
	s.r.Add(func() { lis.Close() })
	go v.acceptLoop()
	go func() {
		<-s.vm.proc.done
		lis.Close()
		v.dropCurrent()
	}()
	return nil
}

// vncServer hands the VNC socket's clients to QEMU one at a time: a new client takes the
// display over and the previous one is disconnected (KubeVirt's rule for VNC).
type vncServer struct {
	vm  *VM
	lis net.Listener

	mu      sync.Mutex
	current *net.UnixConn // our copy of the client QEMU serves, kept to disconnect it
}

func (v *vncServer) acceptLoop() {
	for {
		c, err := v.lis.Accept()
		if err != nil {
			return // listener closed: QEMU exited or Start failed
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			continue
		}
		if err := v.handOff(uc); err != nil {
			v.vm.log.Warn("vnc client refused", "err", err)
			uc.Close()
			continue
		}
		v.mu.Lock()
		prev := v.current
		v.current = uc
		v.mu.Unlock()
		disconnect(prev)
	}
}

// handOff gives QEMU the client's socket.
//
// QMP: getfd {"fdname": "vnc_client"} with the socket in SCM_RIGHTS, then
// {"execute": "add_client", "arguments": {"protocol": "vnc", "fdname": "vnc_client"}}.
func (v *vncServer) handOff(c *net.UnixConn) error {
	f, err := c.File()
	if err != nil {
		return fmt.Errorf("vnc client: %w", err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), vncHandoffTimeout)
	defer cancel()
	if err := v.vm.getfd(ctx, vncClientFD, f); err != nil {
		return err
	}
	args := map[string]any{"protocol": "vnc", "fdname": vncClientFD, "skipauth": false}
	if err := v.vm.mon.Execute(ctx, "add_client", args, nil); err != nil {
		_ = v.vm.mon.Execute(ctx, "closefd", map[string]any{"fdname": vncClientFD}, nil)
		return fmt.Errorf("add vnc client: %w", err)
	}
	return nil
}

func (v *vncServer) dropCurrent() {
	v.mu.Lock()
	c := v.current
	v.current = nil
	v.mu.Unlock()
	disconnect(c)
}

// disconnect ends a client's connection for QEMU too: shutdown(2) acts on the socket, which
// QEMU shares, not only on this process's descriptor.
func disconnect(c *net.UnixConn) {
	if c == nil {
		return
	}
	if rc, err := c.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
	c.Close()
}

// Screendump writes the display as a PNG file at path (QEMU opens it with O_CREAT|O_TRUNC as
// its own user: give it a path in a folder only vmlet and QEMU can write). ErrNoDisplay
// without Graphics.
//
// QMP: {"execute": "screendump", "arguments": {"filename": PATH, "device": "video_0",
// "format": "png"}}.
func (vm *VM) Screendump(ctx context.Context, path string) error {
	if vm.spec.Graphics == nil {
		return ErrNoDisplay
	}
	if err := checkPath("screendump", path); err != nil {
		return err
	}
	args := map[string]any{"filename": path, "device": devVideo, "format": "png"}
	if err := vm.mon.Execute(ctx, "screendump", args, nil); err != nil {
		return fmt.Errorf("screendump: %w", err)
	}
	return nil
}

// HasDisplay reports whether the VM has a display (Graphics).
func (vm *VM) HasDisplay() bool { return vm.spec.Graphics != nil }
