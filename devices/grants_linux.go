package devices

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/revert"
)

// grantMu serialises the read-modify-write of grants entries within this process. One agent
// per node changes a cgroup's grants; other processes are not locked out.
var grantMu sync.Mutex

// Grant allows r (an allow rule) from now on: the next open or mknod in the cgroup sees it.
// Access bits add to those already granted for the same device. Equivalent to: bpftool map
// update id <grants> key <type major minor> value <bits>.
func (f *Filter) Grant(r Rule) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("grant device: %w", err)
	}
	if !r.Allow {
		return fmt.Errorf("grant device %q: %w", r, ErrGrantDeny)
	}
	grantMu.Lock()
	defer grantMu.Unlock()
	undo := revert.New()
	defer undo.Fail()
	for _, k := range grantKeys(r) {
		old, err := f.lookup(k)
		if err != nil {
			return fmt.Errorf("grant device %q: %w", r, err)
		}
		if err := f.grants.Update(k, old|uint32(r.Access), ebpf.UpdateAny); err != nil {
			if errors.Is(err, unix.E2BIG) {
				err = fmt.Errorf("%w: %w", ErrGrantsFull, err)
			}
			return fmt.Errorf("grant device %q: %w", r, err)
		}
		undo.Add(func() { _ = f.set(k, old) })
	}
	undo.Success()
	return nil
}

// Revoke removes r's access bits from the grant for exactly r's device (same type, major and
// minor, wildcards included): the next open or mknod in the cgroup is refused unless a static
// rule or another grant still allows it. Revoking what is not granted is not an error. Files
// opened before keep working: the kernel checks devices at open and mknod only.
// Equivalent to: bpftool map update|delete id <grants> key <type major minor>.
func (f *Filter) Revoke(r Rule) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("revoke device: %w", err)
	}
	grantMu.Lock()
	defer grantMu.Unlock()
	undo := revert.New()
	defer undo.Fail()
	for _, k := range grantKeys(r) {
		old, err := f.lookup(k)
		if err != nil {
			return fmt.Errorf("revoke device %q: %w", r, err)
		}
		if err := f.set(k, old&^uint32(r.Access)); err != nil {
			return fmt.Errorf("revoke device %q: %w", r, err)
		}
		undo.Add(func() { _ = f.set(k, old) })
	}
	undo.Success()
	return nil
}

func (f *Filter) lookup(k mapKey) (uint32, error) {
	var v uint32
	err := f.grants.Lookup(k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up grant: %w", err)
	}
	return v, nil
}

// set writes v for k, deleting the entry when v is 0.
func (f *Filter) set(k mapKey, v uint32) error {
	if v != 0 {
		if err := f.grants.Update(k, v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("update grant: %w", err)
		}
		return nil
	}
	if err := f.grants.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete grant: %w", err)
	}
	return nil
}

// Rules returns the rules in force through this program: its static rules (canonical) followed
// by the current grants read from the kernel, sorted. Evaluate over them decides as the program
// does.
func (f *Filter) Rules() ([]Rule, error) {
	rules := slices.Clone(f.static)
	grants, err := f.Grants()
	if err != nil {
		return nil, err
	}
	return append(rules, grants...), nil
}

// Static returns the static rules compiled into the program (canonical).
func (f *Filter) Static() []Rule { return slices.Clone(f.static) }

// Grants returns the current grants read from the kernel, sorted ('a' grants show as one
// 'b' and one 'c' rule).
func (f *Filter) Grants() ([]Rule, error) {
	var (
		k      mapKey
		v      uint32
		grants []Rule
	)
	it := f.grants.Iterate()
	for it.Next(&k, &v) {
		r, static, err := decodeEntry(k, v)
		if err != nil {
			return nil, fmt.Errorf("read grants: %w", err)
		}
		if static {
			return nil, fmt.Errorf("read grants: record entry %+v: %w", k, ErrInvalidRule)
		}
		grants = append(grants, r)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	slices.SortFunc(grants, compareRules)
	return grants, nil
}
