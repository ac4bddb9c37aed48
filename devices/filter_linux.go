package devices

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Filter is this package's device program on one cgroup: static rules compiled in, plus the
// grants map that Grant and Revoke change while the program stays attached.
//
// The program is attached the legacy way (BPF_PROG_ATTACH with BPF_F_ALLOW_MULTI), so the
// cgroup holds it: it survives the exit of the attaching process (a bpf_link would die with
// it unless pinned, and an agent restart would fail open), nothing is pinned in a bpffs, and
// it goes away with the cgroup. Recover finds it again. A Filter only holds fds; Close drops
// them and leaves the program attached.
type Filter struct {
	cgroup string
	static []Rule // canonical
	prog   *ebpf.Program
	grants *ebpf.Map
	rules  *ebpf.Map
}

// grantMu serialises the read-modify-write of grants entries within this process. One agent
// per node changes a cgroup's grants; other processes are not locked out.
var grantMu sync.Mutex

// Attach makes rules the static rules of the vmlet device program on the cgroup at
// cgroupPath, idempotently and atomically:
//
//   - a vmlet program with the same rules already attached is kept as is (with its grants);
//   - one with other rules is replaced in place (BPF_F_REPLACE): the new program shares the
//     old one's grants map, so grants survive and there is never a moment with no filter or
//     with both;
//   - otherwise the program is attached (BPF_F_ALLOW_MULTI).
//
// A foreign device program (runc, systemd) directly on the cgroup makes Attach fail with
// ErrForeignProgram before any change, because two programs AND each other; see
// ReplaceKeeping. Programs on ancestor cgroups still apply on top of ours.
// Equivalent to: bpftool cgroup attach <cgroup> device <prog> multi [replace <old>]
func Attach(cgroupPath string, rules []Rule) (*Filter, error) {
	f, err := install(cgroupPath, rules, false)
	if err != nil {
		return nil, fmt.Errorf("attach device filter to %s: %w", cgroupPath, err)
	}
	return f, nil
}

// ReplaceKeeping installs the vmlet program with static rules keep+rules on a cgroup that
// already carries another device program (runc's, for a launcher container), replacing it
// atomically. Since programs AND, widening a container's access needs one program that keeps
// the old program's rules: pass them as keep (RuncDefaultRules plus the container's spec
// devices). Exactly one program remains attached to the cgroup; extra ones are detached after
// the replace, which only removes restrictions beyond keep+rules.
func ReplaceKeeping(cgroupPath string, keep, rules []Rule) (*Filter, error) {
	f, err := install(cgroupPath, append(slices.Clip(keep), rules...), true)
	if err != nil {
		return nil, fmt.Errorf("replace device filter on %s: %w", cgroupPath, err)
	}
	return f, nil
}

func install(cgroupPath string, rules []Rule, replaceForeign bool) (*Filter, error) {
	if err := validateAll(rules); err != nil {
		return nil, err
	}
	static := Canonical(rules)
	cg, err := openCgroup(cgroupPath)
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	found, err := attachedPrograms(cg)
	if err != nil {
		return nil, err
	}
	defer func() { closeAll(found) }() // entries set to nil are handed to the Filter

	var ours, foreign []*attached
	for _, a := range found {
		if a.ours() {
			ours = append(ours, a)
		} else {
			foreign = append(foreign, a)
		}
	}
	if len(foreign) > 0 && !replaceForeign {
		return nil, fmt.Errorf("programs %v: %w", ids(foreign), ErrForeignProgram)
	}
	others := append(slices.Clip(ours), foreign...) // ours first: replace ours before theirs

	var keep *attached
	for i, a := range ours {
		rs, err := readRules(a.rules)
		if err != nil {
			return nil, err
		}
		if slices.Equal(rs, static) {
			keep = a
			others = slices.Delete(others, i, i+1)
			break
		}
	}

	var undo revert
	defer undo.fail()
	if keep == nil {
		var replace *attached
		if len(others) > 0 {
			replace, others = others[0], others[1:]
		}
		if keep, err = newProgram(static, replace); err != nil {
			return nil, err
		}
		undo.add(keep.Close)
		var old *ebpf.Program
		if replace != nil {
			old = replace.prog
		}
		if err := attachProgram(cg, keep.prog, old); err != nil {
			return nil, err
		}
		undo.add(func() {
			if old != nil {
				_ = attachProgram(cg, old, keep.prog)
			} else {
				_ = detachProgram(cg, keep.prog)
			}
		})
	} else {
		found[slices.Index(found, keep)] = nil
		undo.add(keep.Close)
	}
	for _, o := range others {
		if err := detachProgram(cg, o.prog); err != nil && !isNotExist(err) {
			return nil, err
		}
		undo.add(func() { _ = attachProgram(cg, o.prog, nil) })
	}
	undo.success()
	return &Filter{cgroup: cgroupPath, static: static, prog: keep.prog, grants: keep.grants, rules: keep.rules}, nil
}

// newProgram loads a program for static that shares replace's grants map when replace is
// ours, or gets a new one.
func newProgram(static []Rule, replace *attached) (_ *attached, err error) {
	var undo revert
	defer undo.fail()
	var grants *ebpf.Map
	if replace != nil && replace.ours() {
		grants, err = replace.grants.Clone()
	} else {
		grants, err = newGrantsMap()
	}
	if err != nil {
		return nil, fmt.Errorf("open grants map: %w", err)
	}
	undo.add(func() { grants.Close() })
	rules, err := newRulesMap(static)
	if err != nil {
		return nil, err
	}
	undo.add(func() { rules.Close() })
	prog, err := loadProgram(static, grants, rules)
	if err != nil {
		return nil, err
	}
	undo.success()
	return &attached{prog: prog, grants: grants, rules: rules}, nil
}

func ids(as []*attached) []ebpf.ProgramID {
	out := make([]ebpf.ProgramID, len(as))
	for i, a := range as {
		out[i] = a.id
	}
	return out
}

// Recover finds the vmlet device program on the cgroup at cgroupPath, attached by an earlier
// process, and returns a Filter that can change it. It fails with ErrNotAttached when there is
// none. Equivalent to: bpftool cgroup show <cgroup>; bpftool prog show id <id> (map_ids).
func Recover(cgroupPath string) (*Filter, error) {
	cg, err := openCgroup(cgroupPath)
	if err != nil {
		return nil, fmt.Errorf("recover device filter on %s: %w", cgroupPath, err)
	}
	defer cg.Close()
	found, err := attachedPrograms(cg)
	if err != nil {
		return nil, fmt.Errorf("recover device filter on %s: %w", cgroupPath, err)
	}
	defer func() { closeAll(found) }() // the entry set to nil is handed to the Filter
	i := slices.IndexFunc(found, (*attached).ours)
	if i < 0 {
		return nil, fmt.Errorf("recover device filter on %s: %w", cgroupPath, ErrNotAttached)
	}
	a := found[i]
	static, err := readRules(a.rules)
	if err != nil {
		return nil, fmt.Errorf("recover device filter on %s: %w", cgroupPath, err)
	}
	found[i] = nil
	return &Filter{cgroup: cgroupPath, static: static, prog: a.prog, grants: a.grants, rules: a.rules}, nil
}

// CgroupPath returns the cgroup the filter is on.
func (f *Filter) CgroupPath() string { return f.cgroup }

// ProgramID returns the kernel id of the filter's program.
func (f *Filter) ProgramID() (ebpf.ProgramID, error) {
	info, err := f.prog.Info()
	if err != nil {
		return 0, fmt.Errorf("inspect device program: %w", err)
	}
	id, _ := info.ID()
	return id, nil
}

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
	var undo revert
	defer undo.fail()
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
		undo.add(func() { _ = f.set(k, old) })
	}
	undo.success()
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
	var undo revert
	defer undo.fail()
	for _, k := range grantKeys(r) {
		old, err := f.lookup(k)
		if err != nil {
			return fmt.Errorf("revoke device %q: %w", r, err)
		}
		if err := f.set(k, old&^uint32(r.Access)); err != nil {
			return fmt.Errorf("revoke device %q: %w", r, err)
		}
		undo.add(func() { _ = f.set(k, old) })
	}
	undo.success()
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

// Attached reports whether the filter's program is still attached to its cgroup (another
// Attach may have replaced it; a replacement shares the grants map).
func (f *Filter) Attached() (bool, error) {
	id, err := f.ProgramID()
	if err != nil {
		return false, err
	}
	cg, err := openCgroup(f.cgroup)
	if err != nil {
		return false, err
	}
	defer cg.Close()
	found, err := attachedPrograms(cg)
	if err != nil {
		return false, err
	}
	defer closeAll(found)
	return slices.ContainsFunc(found, func(a *attached) bool { return a.id == id }), nil
}

// Detach removes the program from its cgroup and closes the filter. The cgroup is then
// unfiltered (only ancestors' programs apply): use it when tearing a cgroup down, or removing
// the cgroup does the same. Detaching a program that is already gone is not an error; a
// closed Filter returns os.ErrClosed (Recover a new one).
// Equivalent to: bpftool cgroup detach <cgroup> device id <prog>
func (f *Filter) Detach() error {
	if f.prog.FD() < 0 {
		return fmt.Errorf("detach device filter from %s: %w", f.cgroup, os.ErrClosed)
	}
	cg, err := openCgroup(f.cgroup)
	if err != nil && !isNotExist(err) {
		return fmt.Errorf("detach device filter from %s: %w", f.cgroup, err)
	}
	if err == nil {
		defer cg.Close()
		if err := detachProgram(cg, f.prog); err != nil && !isNotExist(err) {
			return fmt.Errorf("detach device filter from %s: %w", f.cgroup, err)
		}
	}
	return f.Close()
}

// Close releases the filter's fds; the program stays attached to the cgroup.
func (f *Filter) Close() error {
	return errors.Join(f.prog.Close(), f.grants.Close(), f.rules.Close())
}
