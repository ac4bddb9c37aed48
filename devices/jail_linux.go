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

// Close kills everything in the jail and waits for it, then detaches the filter (only now: a
// live process never runs unfiltered) and removes the cgroup. ctx bounds the wait. The
// program and maps are freed once the kernel drops its last references.
func (j *Jail) Close(ctx context.Context) error {
	if err := j.Cgroup.Kill(ctx); err != nil {
		return fmt.Errorf("close jail: %w", err)
	}
	if err := j.Filter.Detach(); err != nil {
		return fmt.Errorf("close jail: %w", err)
	}
	if err := j.Cgroup.Remove(ctx); err != nil {
		return fmt.Errorf("close jail: %w", err)
	}
	return nil
}
