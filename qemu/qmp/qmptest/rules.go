package qmptest

import (
	"encoding/json"
	"reflect"
)

// Error is a scripted QMP error reply {"class": ..., "desc": ...}.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

// Rule scripts the answer to commands with one name. Build it with the chained methods right
// after Server.On; rules are matched in the order they were added, skipping exhausted ones.
type Rule struct {
	srv       *Server
	name      string
	args      any  // decoded arguments to match (nil: any)
	matchArgs bool // WithArgs was called
	times     int  // uses left; <0 unlimited
	ret       any
	err       *Error
	events    []event
	after     <-chan struct{}
	noReply   bool
	closeConn bool
	do        func(Command) (any, *Error)
}

type event struct {
	name string
	data any
}

// WithArgs makes the rule match only commands whose arguments equal args as JSON values.
func (r *Rule) WithArgs(args any) *Rule {
	v, err := canonical(args)
	if err != nil {
		panic("qmptest: WithArgs: " + err.Error())
	}
	return r.set(func() { r.args, r.matchArgs = v, true })
}

// Return makes the reply {"return": v}. The default is {"return": {}}.
func (r *Rule) Return(v any) *Rule { return r.set(func() { r.ret = v }) }

// Error makes the reply {"error": {"class": class, "desc": desc}}.
func (r *Rule) Error(class, desc string) *Rule {
	return r.set(func() { r.err = &Error{Class: class, Desc: desc} })
}

// Do computes the reply from the command (ret, or errReply if non-nil).
func (r *Rule) Do(fn func(cmd Command) (ret any, errReply *Error)) *Rule {
	return r.set(func() { r.do = fn })
}

// Emit sends event name with data (nil for none) before the reply, like QEMU's STOP before the
// reply to "stop". Several calls emit several events in order.
func (r *Rule) Emit(name string, data any) *Rule {
	return r.set(func() { r.events = append(r.events, event{name, data}) })
}

// After holds the reply (and events) until ch is closed; other commands are answered
// meanwhile, so replies go out in a different order than the commands came in.
func (r *Rule) After(ch <-chan struct{}) *Rule { return r.set(func() { r.after = ch }) }

// Times limits the rule to n uses; later commands fall through to later rules.
func (r *Rule) Times(n int) *Rule { return r.set(func() { r.times = n }) }

// NoReply records the command and never answers it.
func (r *Rule) NoReply() *Rule { return r.set(func() { r.noReply = true }) }

// CloseConn closes the connection instead of answering (QEMU crashing mid-command).
func (r *Rule) CloseConn() *Rule { return r.set(func() { r.closeConn = true }) }

func (r *Rule) set(fn func()) *Rule {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	fn()
	return r
}

// match reports whether the rule applies to cmd and uses it up. Called with srv.mu held.
func (r *Rule) match(cmd Command) bool {
	if r.name != cmd.Name || r.times == 0 {
		return false
	}
	if r.matchArgs {
		got, err := canonical(cmd.Args)
		if err != nil || !reflect.DeepEqual(got, r.args) {
			return false
		}
	}
	if r.times > 0 {
		r.times--
	}
	return true
}

// canonical turns v (a Go value or raw JSON) into its generic JSON form for comparison.
func canonical(v any) (any, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	if len(raw) == 0 {
		raw = json.RawMessage("null")
	}
	var out any
	err := json.Unmarshal(raw, &out)
	return out, err
}
