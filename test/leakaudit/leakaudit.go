package leakaudit

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Kind names, in the order a Report lists them.
const (
	Processes   = "processes"
	Cgroups     = "cgroups"
	Netns       = "netns"
	Links       = "links"
	Taps        = "taps"
	NftTables   = "nft tables"
	BPFPrograms = "bpf programs"
	Mounts      = "mounts"
	Files       = "files"
)

// Kinds are every kind, in report order.
var Kinds = []string{Processes, Cgroups, Netns, Links, Taps, NftTables, BPFPrograms, Mounts, Files}

// Scope says where to look. Empty fields are not looked at (their kinds count 0).
type Scope struct {
	// Dirs are folders whose files, folders and mount points count (e.g. the agent's run
	// root and volume root; not a shared image cache, which is meant to stay).
	Dirs []string
	// Cgroups are cgroup folders whose sub-folders (and the device programs attached to
	// them) count, e.g. the agent's cgroup parent.
	Cgroups []string
	// Netns is the node's network namespace (a bind-mounted path) whose links, taps and
	// nftables tables count; "" means none.
	Netns string
	// NetnsDirs are folders where pod namespaces are bind-mounted.
	NetnsDirs []string
	// Processes are substrings of a command line (argv joined by spaces) that make a process
	// count, e.g. the launcher binary's path or the run root.
	Processes []string
	// IgnoreLink leaves links out by name (e.g. a test's own client veths); nil: none.
	IgnoreLink func(name string) bool
}

// Snapshot is what a Scope held at one moment.
type Snapshot struct {
	scope Scope
	at    time.Time
	kinds map[string]map[string]bool
}

// Take snapshots the scope.
func Take(s Scope) (*Snapshot, error) {
	kinds, err := collect(s)
	if err != nil {
		return nil, err
	}
	return &Snapshot{scope: s, at: time.Now(), kinds: kinds}, nil
}

// Scope returns the snapshot's scope.
func (s *Snapshot) Scope() Scope { return s.scope }

// Diff looks again and returns what is there now and was not in the snapshot.
func (s *Snapshot) Diff() (Report, error) {
	now, err := collect(s.scope)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Left: map[string][]string{}}
	for _, k := range Kinds {
		for obj := range now[k] {
			if !s.kinds[k][obj] {
				rep.Left[k] = append(rep.Left[k], obj)
			}
		}
		sort.Strings(rep.Left[k])
	}
	return rep, nil
}

// Settle diffs until nothing is left or d passes, and returns the last diff: some teardown
// the kernel finishes after the last call returns (a netns whose last process exited, a
// cgroup whose processes are still being reaped). A failed look counts as a leak of kind
// "audit" so that it cannot pass unnoticed.
func (s *Snapshot) Settle(d time.Duration) Report {
	deadline := time.Now().Add(d)
	for {
		rep, err := s.Diff()
		if err != nil {
			rep = Report{Left: map[string][]string{"audit": {err.Error()}}}
		}
		if rep.Total() == 0 || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(100 * time.Millisecond) // polling the kernel's state; bounded by d
	}
}

// Report lists, per kind, the objects left.
type Report struct {
	Left map[string][]string
}

// Count is how many objects of kind are left.
func (r Report) Count(kind string) int { return len(r.Left[kind]) }

// Total is how many objects are left, all kinds together.
func (r Report) Total() int {
	n := 0
	for _, l := range r.Left {
		n += len(l)
	}
	return n
}

// String is every kind with its count: "processes 0, cgroups 0, …, files 0".
func (r Report) String() string {
	parts := make([]string, 0, len(Kinds)+1)
	for _, k := range Kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, r.Count(k)))
	}
	if n := r.Count("audit"); n > 0 {
		parts = append(parts, fmt.Sprintf("audit errors %d", n))
	}
	return strings.Join(parts, ", ")
}

// Detail names every object left, one kind a line; "" when nothing is.
func (r Report) Detail() string {
	var b strings.Builder
	for _, k := range append(append([]string(nil), Kinds...), "audit") {
		if l := r.Left[k]; len(l) > 0 {
			fmt.Fprintf(&b, "%s left: %s\n", k, strings.Join(l, ", "))
		}
	}
	return b.String()
}

// Err is nil when nothing is left, else an error naming what is.
func (r Report) Err() error {
	if r.Total() == 0 {
		return nil
	}
	return errors.New("leaked: " + r.String() + "\n" + r.Detail())
}
