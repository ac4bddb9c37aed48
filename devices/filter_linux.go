package devices

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/vmlet/vmlet/internal/revert"
)

// Filter is this package's device program on one cgroup: static rules compiled in, plus the
// grants map that Grant and Revoke change while the program stays attached.
//
// The program is attached the legacy way (BPF_PROG_ATTACH with BPF_F_ALLOW_MULTI), so the
// cgroup holds it: it survives the exit of the attaching process (a bpf_link would die with
// it unless pinned, and an agent restart would fail open), nothing is pinned in a bpffs, and
// it goes away with the cgroup. Recover finds it again. A Filter only holds fds; Close drops
// them and leaves the program attached. Grant, Revoke and the readers may be called
// concurrently; Detach and Close must not race with them.
type Filter struct {
	cgroup string
	static []Rule // canonical
	prog   *ebpf.Program
	grants *ebpf.Map
	rules  *ebpf.Map
}

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

	undo := revert.New()
	defer undo.Fail()
	if keep == nil {
		var replace *attached
		if len(others) > 0 {
			replace, others = others[0], others[1:]
		}
		if keep, err = newProgram(static, replace); err != nil {
			return nil, err
		}
		undo.Add(keep.Close)
		var old *ebpf.Program
		if replace != nil {
			old = replace.prog
		}
		if err := attachProgram(cg, keep.prog, old); err != nil {
			return nil, err
		}
		undo.Add(func() {
			if old != nil {
				_ = attachProgram(cg, old, keep.prog)
			} else {
				_ = detachProgram(cg, keep.prog)
			}
		})
	} else {
		found[slices.Index(found, keep)] = nil
		undo.Add(keep.Close)
	}
	for _, o := range others {
		if err := detachProgram(cg, o.prog); err != nil && !isNotExist(err) {
			return nil, err
		}
		undo.Add(func() { _ = attachProgram(cg, o.prog, nil) })
	}
	undo.Success()
	return &Filter{cgroup: cgroupPath, static: static, prog: keep.prog, grants: keep.grants, rules: keep.rules}, nil
}

// newProgram loads a program for static that shares replace's grants map when replace is
// ours, or gets a new one.
func newProgram(static []Rule, replace *attached) (_ *attached, err error) {
	undo := revert.New()
	defer undo.Fail()
	var grants *ebpf.Map
	if replace != nil && replace.ours() {
		grants, err = replace.grants.Clone()
	} else {
		grants, err = newGrantsMap()
	}
	if err != nil {
		return nil, fmt.Errorf("open grants map: %w", err)
	}
	undo.Add(func() { grants.Close() })
	rules, err := newRulesMap(static)
	if err != nil {
		return nil, err
	}
	undo.Add(func() { rules.Close() })
	prog, err := loadProgram(static, grants, rules)
	if err != nil {
		return nil, err
	}
	undo.Success()
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
