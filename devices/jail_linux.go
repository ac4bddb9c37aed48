package devices

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// Jail is a fresh cgroup carrying a vmlet device filter, for one launcher and its QEMU. Start
// processes in it with Start; grant hot-plugged devices with Filter.Grant.
type Jail struct {
	Cgroup *Cgroup
	Filter *Filter
}

// NewJail creates the cgroup parent/name (parent "" is the cgroup2 root) and attaches rules
// (typically Baseline). On failure nothing is left behind.
// Equivalent to: mkdir <cgroup>; bpftool cgroup attach <cgroup> device <prog> multi
func NewJail(parent, name string, rules []Rule) (*Jail, error) {
	cg, err := NewCgroup(parent, name)
	if err != nil {
		return nil, fmt.Errorf("create jail: %w", err)
	}
	f, err := Attach(cg.Path, rules)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("create jail: %w", err), RemoveCgroup(context.Background(), cg.Path))
	}
	return &Jail{Cgroup: cg, Filter: f}, nil
}

// Start starts cmd inside the jail's cgroup, filtered from its first instruction.
func (j *Jail) Start(cmd *exec.Cmd) error { return j.Cgroup.Start(cmd) }

// Close kills everything in the jail, removes its cgroup (the kernel then frees the program
// and its maps) and releases the filter's fds. ctx bounds the wait for processes to die.
func (j *Jail) Close(ctx context.Context) error {
	return errors.Join(j.Filter.Close(), j.Cgroup.Remove(ctx))
}
