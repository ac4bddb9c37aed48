package vmistream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Subprotocol is the websocket subprotocol of every stream (KubeVirt's): binary messages carry
// raw bytes (console, VNC, port-forward), text messages one QMP object each.
const Subprotocol = "plain.kubevirt.io"

// CloseTakenOver is the websocket close code sent to a console or VNC client when another
// client took over (4000–4999 are the application's; 4409 echoes HTTP 409).
const CloseTakenOver = 4409

var upgrader = websocket.Upgrader{
	Subprotocols: []string{Subprotocol},
	// Only the aggregated server reaches this server (mTLS): no browser origin to check.
	CheckOrigin: func(*http.Request) bool { return true },
}

// session is the one console or VNC client of a VMI.
type session struct {
	takenOver chan struct{} // closed when a newer client takes over
	done      chan struct{} // closed when this session released its socket
}

// takeOver registers a new session for key, telling the previous one (if any) to end and
// waiting until it released its socket (QEMU serves one client per socket).
func (s *Server) takeOver(ctx context.Context, key string) (*session, error) {
	n := &session{takenOver: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	old := s.sessions[key]
	s.sessions[key] = n
	s.mu.Unlock()
	if old == nil {
		return n, nil
	}
	close(old.takenOver)
	select {
	case <-old.done:
		return n, nil
	case <-ctx.Done():
		s.release(key, n)
		return nil, ctx.Err()
	}
}

// release ends session n of key.
func (s *Server) release(key string, n *session) {
	s.mu.Lock()
	if s.sessions[key] == n {
		delete(s.sessions, key)
	}
	s.mu.Unlock()
	close(n.done)
}

// exclusive relays a websocket to the unix socket rel of the VMI's run folder, one client at a
// time per (VMI, rel).
func (s *Server) exclusive(w http.ResponseWriter, r *http.Request, t *target, what, rel string) {
	key := string(t.vmi.UID) + "/" + what
	n, err := s.takeOver(r.Context(), key)
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	defer s.release(key, n)
	conn, err := dialUnix(r.Context(), t.runDir, rel)
	if err != nil {
		WriteStatus(w, apierrors.NewConflict(vmiResource, t.vmi.Name, fmt.Errorf("%s: %w", what, err)))
		return
	}
	defer conn.Close()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade answered the client
	}
	s.cfg.Log.V(1).Info("stream open", "vmi", t.vmi.Namespace+"/"+t.vmi.Name, "stream", what, "caller", t.caller)
	relay(ws, conn, n.takenOver)
}

// relay copies binary websocket messages to conn and conn's bytes to binary messages until
// either side ends or stop closes (then the client is told CloseTakenOver).
func relay(ws *websocket.Conn, conn net.Conn, stop <-chan struct{}) {
	defer ws.Close()
	errc := make(chan error, 2)
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := conn.Read(buf)
			if n > 0 {
				if werr := ws.WriteMessage(websocket.BinaryMessage, buf[:n]); werr != nil {
					errc <- werr
					return
				}
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		for {
			_, rd, err := ws.NextReader()
			if err != nil {
				errc <- err
				return
			}
			if _, err := io.Copy(conn, rd); err != nil {
				errc <- err
				return
			}
		}
	}()
	var msg []byte
	select {
	case <-stop:
		msg = websocket.FormatCloseMessage(CloseTakenOver, "taken over by another client")
	case err := <-errc:
		code := websocket.CloseNormalClosure
		if errors.Is(err, io.EOF) {
			code = websocket.CloseGoingAway // the socket's far end (QEMU, the guest port) closed
		}
		msg = websocket.FormatCloseMessage(code, "")
	}
	_ = ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
	_ = conn.Close()
}
