package subresclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrQMP is what a QMP {"error":…} reply is (errors.Is).
var ErrQMP = errors.New("qmp error")

// ReplyError is QEMU's {"error":{"class":…,"desc":…}} reply.
type ReplyError struct {
	Class, Desc string
}

func (e *ReplyError) Error() string { return fmt.Sprintf("qmp error %s: %s", e.Class, e.Desc) }

// Is makes errors.Is(err, ErrQMP) true.
func (e *ReplyError) Is(target error) bool { return target == ErrQMP }

// CheckReply returns a *ReplyError when reply is an {"error":…} reply, else nil.
func CheckReply(reply []byte) error {
	var r struct {
		Error *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if json.Unmarshal(reply, &r) != nil || r.Error == nil {
		return nil
	}
	return &ReplyError{Class: r.Error.Class, Desc: r.Error.Desc}
}

// ErrBadCommand is a QMP command line that is neither JSON nor NAME [ARGUMENTS-JSON].
var ErrBadCommand = errors.New("bad qmp command")

// ParseCommand turns one command line into a QMP command object. It accepts the JSON object
// itself ({"execute":"query-status"}), a bare command name (query-status) and a name followed
// by its arguments as a JSON object (device_del {"id":"disk1"}).
func ParseCommand(line string) ([]byte, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, fmt.Errorf("%w: empty", ErrBadCommand)
	}
	if strings.HasPrefix(line, "{") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadCommand, err)
		}
		if _, ok := obj["execute"]; !ok {
			return nil, fmt.Errorf("%w: no \"execute\" member", ErrBadCommand)
		}
		return []byte(line), nil
	}
	name, args, _ := strings.Cut(line, " ")
	cmd := struct {
		Execute   string          `json:"execute"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
	}{Execute: name}
	if args = strings.TrimSpace(args); args != "" {
		var a map[string]json.RawMessage
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			return nil, fmt.Errorf("%w: arguments of %s are not a JSON object: %w", ErrBadCommand, name, err)
		}
		cmd.Arguments = json.RawMessage(args)
	}
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCommand, err)
	}
	return b, nil
}

// CommandNames reads the names out of a query-commands reply.
func CommandNames(reply []byte) ([]string, error) {
	var r struct {
		Return []struct {
			Name string `json:"name"`
		} `json:"return"`
	}
	if err := json.Unmarshal(reply, &r); err != nil {
		return nil, fmt.Errorf("decode query-commands reply: %w", err)
	}
	names := make([]string, 0, len(r.Return))
	for _, c := range r.Return {
		names = append(names, c.Name)
	}
	return names, nil
}
