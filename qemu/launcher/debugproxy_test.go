package launcher_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmlet/vmlet/qemu/launcher"
	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
)

// qmpPeer is a test client of qmp-debug.sock that reads QMP lines in the background.
type qmpPeer struct {
	t       testing.TB
	c       net.Conn
	lines   chan map[string]json.RawMessage
	backlog []map[string]json.RawMessage // read but not asked for yet (events vs replies race)
}

func dialDebug(t testing.TB, path string) *qmpPeer {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect qmp-debug.sock: %v", err)
	}
	q := &qmpPeer{t: t, c: c, lines: make(chan map[string]json.RawMessage, 64)}
	go func() {
		defer close(q.lines)
		sc := bufio.NewScanner(c)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				q.lines <- m
			}
		}
	}()
	t.Cleanup(func() { c.Close() })
	return q
}

func (q *qmpPeer) send(cmd string) {
	q.t.Helper()
	if _, err := io.WriteString(q.c, cmd+"\n"); err != nil {
		q.t.Fatalf("send %s: %v", cmd, err)
	}
}

// next returns the oldest message that has key; others stay queued for later calls (QEMU
// sends a command's event, e.g. STOP, before or after its reply).
func (q *qmpPeer) next(ctx context.Context, key string) (map[string]json.RawMessage, error) {
	for i, m := range q.backlog {
		if _, has := m[key]; has {
			q.backlog = append(q.backlog[:i], q.backlog[i+1:]...)
			return m, nil
		}
	}
	for {
		select {
		case m, ok := <-q.lines:
			if !ok {
				return nil, fmt.Errorf("qmp-debug connection closed while waiting for %q", key)
			}
			if _, has := m[key]; has {
				return m, nil
			}
			q.backlog = append(q.backlog, m)
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %q on qmp-debug.sock: %w", key, ctx.Err())
		}
	}
}

// debugSession runs a QMP session on qmp-debug.sock while API calls run concurrently, stops
// the guest through it and checks that the launcher noticed (event + GetDomain), then resumes.
func debugSession(t *testing.T, p *proc, rec *recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q := dialDebug(t, p.paths.DebugSocket())
	g, err := q.next(ctx, "QMP")
	if err != nil {
		t.Fatal(err)
	}
	if major, _, _ := strings.Cut(hostQEMUVersion(t), "."); !strings.Contains(string(g["QMP"]), `"major":`+major+`,`) {
		t.Errorf("greeting %s lacks QEMU's version", g["QMP"])
	}
	q.send(`{"execute":"query-status","id":1}`)
	m, err := q.next(ctx, "error")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m["error"]), "CommandNotFound") || string(m["id"]) != "1" {
		t.Errorf("command before qmp_capabilities: %v, want CommandNotFound with id 1", m)
	}
	q.send(`{"execute":"qmp_capabilities","id":"caps"}`)
	if m, err = q.next(ctx, "return"); err != nil || string(m["id"]) != `"caps"` {
		t.Fatalf("qmp_capabilities: %v %v", m, err)
	}

	// The API stays usable while the debug session runs.
	stopAPI := make(chan struct{})
	var apiErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopAPI:
				return
			default:
			}
			if _, err := p.client.GetDomain(ctx); err != nil {
				apiErr = err
				return
			}
		}
	}()

	q.send(`{"execute":"query-status","id":2}`)
	if m, err = q.next(ctx, "return"); err != nil || !strings.Contains(string(m["return"]), `"running"`) || string(m["id"]) != "2" {
		t.Fatalf("query-status: %v %v", m, err)
	}
	from := rec.len()
	q.send(`{"execute":"stop","id":3}`)
	if m, err = q.next(ctx, "return"); err != nil || string(m["id"]) != "3" {
		t.Fatalf("stop: %v %v", m, err)
	}
	if m, err = q.next(ctx, "event"); err != nil || string(m["event"]) != `"STOP"` {
		t.Fatalf("STOP event on qmp-debug.sock: %v %v", m, err)
	}
	if _, err := rec.waitEvent(ctx, from, "paused by qmp-debug", func(e *pb.Event) bool {
		return isState(pb.State_STATE_PAUSED)(e) && e.GetLifecycle().GetQemuEvent() == "STOP"
	}); err != nil {
		t.Fatal(err)
	}
	d, err := p.client.GetDomain(ctx)
	if err != nil || d.GetState() != pb.State_STATE_PAUSED || d.GetReason() != "user" {
		t.Fatalf("GetDomain after stop on qmp-debug.sock: %v/%q %v, want PAUSED/user", d.GetState(), d.GetReason(), err)
	}
	from = rec.len()
	q.send(`{"execute":"cont"}`)
	if m, err = q.next(ctx, "return"); err != nil {
		t.Fatalf("cont: %v %v", m, err)
	}
	if _, hasID := m["id"]; hasID {
		t.Errorf("reply to a command without id carries one: %v", m)
	}
	if _, err := rec.waitEvent(ctx, from, "running", isState(pb.State_STATE_RUNNING)); err != nil {
		t.Fatal(err)
	}
	close(stopAPI)
	wg.Wait()
	if apiErr != nil {
		t.Errorf("API call during the qmp-debug session: %v", apiErr)
	}

	// socat, as a human would use it.
	socat(t, p.paths.DebugSocket())
}

// socat drives `socat - UNIX-CONNECT:qmp-debug.sock`: negotiate, query-status, read the reply.
func socat(t *testing.T, path string) {
	bin, err := exec.LookPath("socat")
	if err != nil {
		t.Errorf("socat not installed (hack/deps.sh installs it): %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-", "UNIX-CONNECT:"+path)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, `{"execute":"qmp_capabilities"}`+"\n"+`{"execute":"query-status","id":"socat"}`+"\n"); err != nil {
		t.Errorf("write to socat: %v", err)
	}
	sc := bufio.NewScanner(out)
	found := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"id":"socat"`) && strings.Contains(sc.Text(), `"status"`) {
			found = true
			break
		}
	}
	in.Close()
	_ = cmd.Wait() // reap socat; its exit status is not what this checks, the reply is
	if !found {
		t.Errorf("socat session got no query-status reply")
	}
}

// qmpRPCs checks the QMP and QMPLog RPCs.
func qmpRPCs(t *testing.T, p *proc) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := make(chan *pb.QMPLogEntry, 1024)
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- p.client.QMPLog(fctx, 1, true, func(e *pb.QMPLogEntry) error {
			follow <- e
			return nil
		})
	}()
	select { // the newest retained entry comes first: the stream is established
	case <-follow:
	case <-ctx.Done():
		t.Fatalf("QMPLog sent no tail entry: %v", ctx.Err())
	}
	reply, err := p.client.QMP(ctx, `{"execute":"query-status","id":"rpc"}`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reply, `"running"`) || !strings.Contains(reply, `"id":"rpc"`) {
		t.Errorf("QMP reply %s", reply)
	}
	reply, err = p.client.QMP(ctx, `{"execute":"no-such-command"}`)
	if err != nil || !strings.Contains(reply, "CommandNotFound") {
		t.Errorf("QMP with an unknown command: reply %s err %v, want QEMU's CommandNotFound reply", reply, err)
	}
	if _, err := p.client.QMP(ctx, `{not json`); !errors.Is(err, launcher.ErrInvalidRequest) {
		t.Errorf("QMP with bad JSON: %v, want ErrInvalidRequest", err)
	}
	seen := func() bool {
		for {
			select {
			case e := <-follow:
				if e.GetDirection() == "cmd" && strings.Contains(e.GetText(), "no-such-command") {
					return true
				}
			case <-ctx.Done():
				return false
			}
		}
	}()
	if !seen {
		t.Errorf("QMPLog follow did not show the command: %v", ctx.Err())
	}
	fcancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) { // fcancel ends the follow
		t.Errorf("QMPLog follow = %v, want nil or context.Canceled", err)
	}
	// A command on behalf of an API user is logged with the user's name, command and reply.
	if reply, err := p.client.QMPAs(ctx, "alice", `{"execute":"query-name"}`); err != nil || !strings.Contains(reply, "return") {
		t.Errorf("QMPAs: %s %v", reply, err)
	}
	var tail []*pb.QMPLogEntry
	if err := p.client.QMPLog(ctx, 20, false, func(e *pb.QMPLogEntry) error { tail = append(tail, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(tail) != 20 {
		t.Errorf("QMPLog tail 20 returned %d entries", len(tail))
	}
	sawReply := false
	for _, e := range tail {
		if e.GetDirection() == "reply" && strings.Contains(e.GetText(), "CommandNotFound") {
			sawReply = true
		}
	}
	if !sawReply {
		t.Errorf("QMPLog tail lacks the error reply")
	}
	byAlice := map[string]bool{}
	for _, e := range tail {
		if e.GetCaller() == "alice" && e.GetOrigin() == "api" {
			byAlice[e.GetDirection()] = true
		}
		if e.GetCaller() != "" && e.GetCaller() != "alice" {
			t.Errorf("QMPLog entry %v names caller %q", e, e.GetCaller())
		}
	}
	if !byAlice["cmd"] || !byAlice["reply"] {
		t.Errorf("QMPLog tail: entries by alice %v, want her command and its reply", byAlice)
	}
}
