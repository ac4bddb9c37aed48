package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	pb "github.com/vmlet/vmlet/qemu/launcher/api/v1"
	"github.com/vmlet/vmlet/qemu/qmp"
)

// defaultQMPTimeout bounds a raw QMP command that names no timeout.
const defaultQMPTimeout = 10 * time.Second

// QMP implements the QMP RPC: one raw command through the launcher's monitor connection.
// QEMU's error replies are returned as the reply, not as an RPC error: the caller wanted
// QEMU's answer verbatim.
func (l *api) QMP(ctx context.Context, req *pb.QMPRequest) (*pb.QMPResponse, error) {
	d, err := l.active()
	if err != nil {
		return nil, err
	}
	timeout := defaultQMPTimeout
	if ms := req.GetTimeoutMs(); ms > 0 {
		timeout = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := []byte(req.GetCommand())
	id, err := commandID(cmd)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w: %w", ErrInvalidRequest, err)
	}
	caller := req.GetCaller()
	if caller != "" { // the API's user: logged by name before its wire line, as debug commands are
		l.qlog.add(time.Now(), "cmd", originAPI, string(cmd), caller)
	}
	reply, err := d.vm.Monitor().ExecuteRaw(ctx, cmd)
	if err := rawError(err); err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	if reply, err = withID(reply, id); err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	if caller != "" {
		l.qlog.add(time.Now(), "reply", originAPI, string(reply), caller)
	}
	return &pb.QMPResponse{Reply: string(reply)}, nil
}

// QMPLog implements the QMPLog RPC: the newest `tail` retained entries, then (follow) new
// ones until the client leaves or the launcher ends.
func (l *api) QMPLog(req *pb.QMPLogRequest, stream pb.Launcher_QMPLogServer) error {
	f := l.qlog.feed
	w := f.since(0, max(int(req.GetTail()), 0))
	if req.GetTail() <= 0 {
		w.items = nil
	}
	for {
		for _, e := range w.items {
			if err := stream.Send(e); err != nil {
				return err
			}
		}
		if !req.GetFollow() || w.closed {
			return nil
		}
		select {
		case <-w.notify:
		case <-stream.Context().Done():
			return stream.Context().Err()
		}
		w = f.since(w.next, 0)
	}
}

// rawError classifies ExecuteRaw's error: nil when there is a reply to pass on (success or a
// QMP error reply), the connection or deadline error as is, anything else (the command did
// not parse) as ErrInvalidRequest.
func rawError(err error) error {
	if _, isQMP := errors.AsType[*qmp.Error](err); err == nil || isQMP {
		return nil
	}
	if errors.Is(err, qmp.ErrDisconnected) || errors.Is(err, qmp.ErrTimeout) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
}

// commandID returns the "id" member of a raw QMP command (nil if none); it fails if the
// command is not a JSON object.
func commandID(cmd []byte) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(cmd, &obj); err != nil {
		return nil, fmt.Errorf("parse command: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("parse command: not a json object")
	}
	return obj["id"], nil
}

// withID replaces the launcher's own id in a reply by the client's (or drops it).
func withID(reply []byte, id json.RawMessage) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(reply, &obj); err != nil {
		return nil, fmt.Errorf("parse reply: %w", err)
	}
	if id == nil {
		delete(obj, "id")
	} else {
		obj["id"] = id
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode reply: %w", err)
	}
	return out, nil
}
