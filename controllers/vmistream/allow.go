package vmistream

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// Headers the aggregated server sets on every request it forwards (a client never reaches
// this server directly: mTLS).
const (
	// HeaderCaller is the authenticated user's name.
	HeaderCaller = "X-Vmlet-Caller"
	// HeaderQMPAllow is the QMP commands the caller may run: comma-separated glob patterns
	// (path.Match: "query-*"), "*" for all. Absent or empty: none.
	HeaderQMPAllow = "X-Vmlet-Qmp-Allow"
)

// AllowList is a set of QMP command patterns (path.Match globs, e.g. "query-*").
type AllowList []string

// ParseAllowList reads a comma- or whitespace-separated list of patterns; it fails on a
// malformed glob. Pure.
func ParseAllowList(s string) (AllowList, error) {
	var out AllowList
	for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' }) {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("qmp allow-list pattern %q: %w", p, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// String is the header form.
func (a AllowList) String() string { return strings.Join(a, ",") }

// Allows reports whether command (a QMP "execute" name) matches a pattern. Pure.
func (a AllowList) Allows(command string) bool {
	for _, p := range a {
		if ok, _ := path.Match(p, command); ok {
			return true
		}
	}
	return false
}

// CommandName is the "execute" (or "exec-oob") member of a QMP command object.
func CommandName(cmd []byte) (string, error) {
	var c struct {
		Execute string `json:"execute"`
		ExecOOB string `json:"exec-oob"`
	}
	if err := json.Unmarshal(cmd, &c); err != nil {
		return "", fmt.Errorf("parse qmp command: %w", err)
	}
	name := c.Execute
	if name == "" {
		name = c.ExecOOB
	}
	if name == "" {
		return "", fmt.Errorf("parse qmp command: no \"execute\"")
	}
	return name, nil
}
