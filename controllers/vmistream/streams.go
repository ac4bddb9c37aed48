package vmistream

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/vmlet/vmlet/internal/nofollow"
	"github.com/vmlet/vmlet/network"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// dialUnix opens a socket of a run folder without following symlinks.
var dialUnix = nofollow.DialUnix

// console relays the serial console (sockets/console.sock).
func (s *Server) console(w http.ResponseWriter, r *http.Request, t *target) {
	s.exclusive(w, r, t, "console", consoleSocket)
}

// vnc relays the display's RFB stream (sockets/vnc.sock); 409 when the VMI has no display.
func (s *Server) vnc(w http.ResponseWriter, r *http.Request, t *target) {
	if c, err := dialUnix(r.Context(), t.runDir, vncSocket); errors.Is(err, fs.ErrNotExist) {
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, errors.New("no display: the VMI has no VNC server (autoattachGraphicsDevice: false?)")))
		return
	} else if err == nil {
		c.Close()
	}
	s.exclusive(w, r, t, "vnc", vncSocket)
}

// callScreenshot bounds a Screenshot RPC.
const callScreenshot = 30 * time.Second

// screenshot answers the display as a PNG (launcher Screenshot): 409 without a display, 501
// from a launcher that cannot take screenshots.
func (s *Server) screenshot(w http.ResponseWriter, r *http.Request, t *target) {
	ctx, cancel := context.WithTimeout(r.Context(), callScreenshot)
	defer cancel()
	c, err := t.dialLauncher(ctx)
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	defer c.Close()
	resp, err := c.API().Screenshot(ctx, &pb.ScreenshotRequest{})
	switch status.Code(err) {
	case codes.OK:
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(resp.GetPng())))
		_, _ = w.Write(resp.GetPng())
	case codes.Unimplemented:
		WriteStatus(w, &apierrors.StatusError{ErrStatus: statusOf(http.StatusNotImplemented, "NotImplemented",
			"this VMI's launcher cannot take screenshots (an older vmlet-launcher)")})
	case codes.FailedPrecondition:
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, fmt.Errorf("screenshot: %s", status.Convert(err).Message())))
	default:
		WriteStatus(w, apierrors.NewInternalError(fmt.Errorf("screenshot: %w", err)))
	}
}

// dialGuest bounds connecting to the guest's port.
const dialGuest = 10 * time.Second

// portForward relays a websocket to one TCP connection to the guest's port {port}, dialed from
// the VMI's pod network namespace to the guest's own address (any port, declared or not).
func (s *Server) portForward(w http.ResponseWriter, r *http.Request, t *target) {
	port, err := strconv.ParseUint(r.PathValue("port"), 10, 16)
	if err != nil || port == 0 {
		WriteStatus(w, apierrors.NewBadRequest(fmt.Sprintf("port %q: want 1-65535", r.PathValue("port"))))
		return
	}
	if s.cfg.Guest == nil {
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, errors.New("this node has no pod network to reach the guest")))
		return
	}
	netns, addr, err := s.cfg.Guest(t.vmi.UID)
	if err != nil {
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), dialGuest)
	conn, err := network.DialTCP(ctx, netns, netip.AddrPortFrom(addr, uint16(port)).String())
	cancel()
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(fmt.Sprintf("connect to guest port %d: %v", port, err)))
		return
	}
	defer conn.Close()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	relay(ws, conn, nil)
}
