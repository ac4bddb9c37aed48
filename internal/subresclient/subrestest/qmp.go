package subrestest

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/vmlet/vmlet/internal/subresclient"
)

// qmp runs one command as the fake QEMU would, for u, and logs it with u's name. A command u
// may not send gives code 403 and its message (nothing logged, as the allow-list refuses
// before QEMU sees it).
func (s *Server) qmp(v *VMI, u user, body []byte) (reply []byte, code int, msg string) {
	var cmd struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(body, &cmd); err != nil || cmd.Execute == "" {
		return errorReply("GenericError", "Invalid JSON syntax"), 0, ""
	}
	if u.role < Admin && !strings.HasPrefix(cmd.Execute, "query-") {
		return nil, http.StatusForbidden, "qmp command " + strconv.Quote(cmd.Execute) + " is not allowed for user " + strconv.Quote(u.name) + " (allowed: query-*)"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ret any = struct{}{}
	switch {
	case !slices.Contains(v.Commands, cmd.Execute):
		reply = errorReply("CommandNotFound", "The command "+cmd.Execute+" has not been found")
	case cmd.Execute == "query-status":
		st := "running"
		if v.Paused {
			st = "paused"
		}
		ret = map[string]any{"status": st, "running": !v.Paused, "singlestep": false}
	case cmd.Execute == "query-commands":
		var l []map[string]string
		for _, c := range v.Commands {
			l = append(l, map[string]string{"name": c})
		}
		ret = l
	case cmd.Execute == "query-name":
		ret = map[string]string{"name": "fake"}
	case cmd.Execute == "stop":
		v.Paused = true
	case cmd.Execute == "cont":
		v.Paused = false
	case cmd.Execute == "quit":
		v.Running = false
	default:
		reply = errorReply("GenericError", "the fake QEMU does not do "+cmd.Execute)
	}
	if reply == nil {
		reply, _ = json.Marshal(map[string]any{"return": ret})
	}
	v.cmds++
	now := time.Now()
	v.log = append(v.log,
		subresclient.QMPLogEntry{Time: now, Direction: "cmd", Text: string(body), Origin: "api", Caller: u.name},
		subresclient.QMPLogEntry{Time: now, Direction: "reply", Text: string(reply), Origin: "api", Caller: u.name})
	close(v.logCh)
	v.logCh = make(chan struct{})
	return reply, 0, ""
}

func errorReply(class, desc string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"class": class, "desc": desc}})
	return b
}

// Commands is how many QMP commands the VMI ran.
func (s *Server) Commands(namespace, name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vmis[namespace+"/"+name].cmds
}

// VMStopped is the close reason of a QMP session whose VM quit.
const VMStopped = "the VM stopped"

// qmpSession answers each text frame with the reply; a refused command gets a
// {"error":{"class":"Forbidden",…}} reply and the session goes on; after quit the session is
// closed with VMStopped.
func (s *Server) qmpSession(w http.ResponseWriter, r *http.Request, v *VMI, u user) {
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		_, b, err := c.ReadMessage()
		if err != nil {
			return
		}
		reply, code, msg := s.qmp(v, u, b)
		if code != 0 {
			reply = errorReply("Forbidden", msg)
		}
		if c.WriteMessage(websocket.TextMessage, reply) != nil {
			return
		}
		s.mu.Lock()
		running := v.Running
		s.mu.Unlock()
		if !running { // quit: QEMU is gone, and the session with it
			msg := websocket.FormatCloseMessage(websocket.CloseGoingAway, VMStopped)
			_ = c.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			return
		}
	}
}

// qmpLog serves the log as ndjson: the last ?tail entries (default 50), then with
// ?follow=true each new one until the client goes.
func (s *Server) qmpLog(w http.ResponseWriter, r *http.Request, v *VMI) {
	tail := 50
	if t := r.URL.Query().Get("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil {
			http.Error(w, "bad tail", http.StatusBadRequest)
			return
		}
		tail = n
	}
	follow := r.URL.Query().Get("follow") == "true"
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	s.mu.Lock()
	sent := max(0, len(v.log)-tail)
	s.mu.Unlock()
	for {
		s.mu.Lock()
		batch := append([]subresclient.QMPLogEntry(nil), v.log[sent:]...)
		sent = len(v.log)
		wait := v.logCh
		s.mu.Unlock()
		for _, e := range batch {
			if enc.Encode(e) != nil {
				return
			}
		}
		if !follow {
			return
		}
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case <-wait:
		case <-r.Context().Done():
			return
		}
	}
}
