package vmistream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// Event reasons of QMP through the API.
const (
	ReasonQMPCommand = "QMPCommand"
	ReasonQMPRefused = "QMPCommandRefused"
)

// maxQMPCommand bounds one command's size.
const maxQMPCommand = 1 << 20

// callQMP bounds one command (the launcher's own default is 10 s).
const callQMP = 15 * time.Second

// check decides one command for the caller: its name, or the refusal (403).
func (s *Server) check(t *target, allow AllowList, cmd []byte) (string, error) {
	name, err := CommandName(cmd)
	if err != nil {
		return "", apierrors.NewBadRequest(err.Error())
	}
	if !allow.Allows(name) {
		s.cfg.Recorder.Eventf(t.vmi, nil, "Warning", ReasonQMPRefused, eventAction(name, t.caller), "user %q may not run %q (allowed: %q)", t.caller, name, allow.String())
		return name, apierrors.NewForbidden(schema.GroupResource{Group: "subresources.vmlet.dev", Resource: "virtualmachineinstances/qmp"}, t.vmi.Name,
			fmt.Errorf("qmp command %q is not in the caller's allow-list %q", name, allow.String()))
	}
	s.cfg.Recorder.Eventf(t.vmi, nil, "Normal", ReasonQMPCommand, eventAction(name, t.caller), "user %q ran %q", t.caller, name)
	return name, nil
}

// eventAction is an Event's action for command name by caller. events.k8s.io folds Events
// that differ only in their note into one series (the first note kept): the command and the
// caller go into the action so that each (command, caller) is an Event of its own, repeats
// counted in its series.
func eventAction(name, caller string) string {
	a := "QMP " + name + " by " + caller
	if len(a) > 128 { // the API's limit
		a = a[:128]
	}
	return a
}

// run sends one allowed command on the caller's behalf.
func (t *target) run(ctx context.Context, c *launcher.Client, cmd []byte) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callQMP)
	defer cancel()
	return c.QMPAs(ctx, t.caller, string(cmd))
}

func allowOf(r *http.Request) AllowList {
	a, _ := ParseAllowList(r.Header.Get(HeaderQMPAllow)) // a bad pattern never matches
	return a
}

// qmpOne runs the command in the body and answers QEMU's reply verbatim.
func (s *Server) qmpOne(w http.ResponseWriter, r *http.Request, t *target) {
	cmd, err := io.ReadAll(io.LimitReader(r.Body, maxQMPCommand))
	if err != nil {
		WriteStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	if _, err := s.check(t, allowOf(r), cmd); err != nil {
		WriteStatus(w, err)
		return
	}
	c, err := t.dialLauncher(r.Context())
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	defer c.Close()
	reply, err := t.run(r.Context(), c, cmd)
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, reply)
}

// qmpSession runs one command per text message and answers each with a text message: QEMU's
// reply, or for a refused command a QMP-shaped error {"error":{"class":"Forbidden",...}}.
func (s *Server) qmpSession(w http.ResponseWriter, r *http.Request, t *target) {
	c, err := t.dialLauncher(r.Context())
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	defer c.Close()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	ws.SetReadLimit(maxQMPCommand)
	allow := allowOf(r)
	for {
		_, cmd, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var reply string
		if _, err := s.check(t, allow, cmd); err != nil {
			reply = qmpError(err)
		} else if reply, err = t.run(r.Context(), c, cmd); err != nil {
			reply = qmpError(err)
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte(reply)); err != nil {
			return
		}
	}
}

// qmpError is err as a QMP error reply; class "Forbidden" for a refusal.
func qmpError(err error) string {
	class := "GenericError"
	if apierrors.IsForbidden(err) {
		class = "Forbidden"
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"class": class, "desc": err.Error()}})
	return string(b)
}

// LogEntry is one line of the qmplog subresource (application/x-ndjson).
type LogEntry struct {
	Time      string `json:"time"` // RFC 3339 with nanoseconds
	Direction string `json:"direction"`
	Text      string `json:"text"`
	Origin    string `json:"origin"`
	Caller    string `json:"caller,omitempty"`
}

// qmpLog streams the launcher's QMP log: ?tail=N newest entries (default 100), then with
// ?follow=true new ones as they come.
func (s *Server) qmpLog(w http.ResponseWriter, r *http.Request, t *target) {
	tail, follow := 100, false
	q := r.URL.Query()
	if v := q.Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			WriteStatus(w, apierrors.NewBadRequest(fmt.Sprintf("tail %q: want a count >= 0", v)))
			return
		}
		tail = n
	}
	if v := q.Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			WriteStatus(w, apierrors.NewBadRequest(fmt.Sprintf("follow %q: want true or false", v)))
			return
		}
		follow = b
	}
	c, err := t.dialLauncher(r.Context())
	if err != nil {
		WriteStatus(w, apierrors.NewServiceUnavailable(err.Error()))
		return
	}
	defer c.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	enc := json.NewEncoder(w)
	_ = c.QMPLog(r.Context(), tail, follow, func(e *pb.QMPLogEntry) error {
		err := enc.Encode(LogEntry{
			Time: time.Unix(0, e.GetTimeUnixNano()).UTC().Format(time.RFC3339Nano), Direction: e.GetDirection(),
			Text: e.GetText(), Origin: e.GetOrigin(), Caller: e.GetCaller(),
		})
		if flusher != nil {
			flusher.Flush()
		}
		return err
	})
}

// statusOf is a failure Status with code, reason and message.
func statusOf(code int32, reason metav1.StatusReason, msg string) metav1.Status {
	return metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
}
