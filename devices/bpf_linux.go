package devices

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Names recognise this package's objects in the kernel (BPF_OBJ_NAME_LEN is 16 with the NUL).
// The suffix is the format version of the maps' keys and values.
const (
	progName      = "vmlet_dev_v1"
	grantsMapName = "vmlet_grants_v1"
	rulesMapName  = "vmlet_rules_v1"
	license       = "Apache-2.0"

	// MaxGrants is how many grant entries a cgroup's grants map holds ('a' grants take two).
	MaxGrants = 1024
	// maxStaticRules bounds the static rule set (its records map is sized to it exactly).
	maxStaticRules = 4096
)

var memlockOnce sync.Once

// removeMemlock lifts RLIMIT_MEMLOCK on kernels that still charge BPF objects to it (< 5.11);
// a no-op where memory cgroup accounting is used.
func removeMemlock() {
	memlockOnce.Do(func() { _ = rlimit.RemoveMemlock() })
}

// openCgroup opens a cgroup directory as the target fd of BPF_PROG_ATTACH/QUERY.
func openCgroup(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	return f, nil
}

// newGrantsMap creates the grants map.
// Equivalent to: bpftool map create … type hash key 12 value 4 entries 1024 name vmlet_grants_v1
func newGrantsMap() (*ebpf.Map, error) {
	removeMemlock()
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: grantsMapName, Type: ebpf.Hash,
		KeySize: mapKeySize, ValueSize: mapValueSize, MaxEntries: MaxGrants,
	})
	if err != nil {
		return nil, fmt.Errorf("create grants map: %w: %w", ErrNoBPF, err)
	}
	return m, nil
}

// newRulesMap creates a frozen map recording the static rules (canonical) compiled into one
// program, so Recover can report them.
func newRulesMap(static []Rule) (*ebpf.Map, error) {
	if len(static) > maxStaticRules {
		return nil, fmt.Errorf("create rules map: %d rules: %w", len(static), ErrGrantsFull)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: rulesMapName, Type: ebpf.Hash,
		KeySize: mapKeySize, ValueSize: mapValueSize, MaxEntries: uint32(max(len(static), 1)),
	})
	if err != nil {
		return nil, fmt.Errorf("create rules map: %w: %w", ErrNoBPF, err)
	}
	for _, r := range static {
		if err := m.Update(recordKey(r), uint32(r.Access), ebpf.UpdateNoExist); err != nil {
			m.Close()
			return nil, fmt.Errorf("record rule %q: %w", r, err)
		}
	}
	if err := m.Freeze(); err != nil {
		m.Close()
		return nil, fmt.Errorf("freeze rules map: %w", err)
	}
	return m, nil
}

// loadProgram compiles static with grant lookups into grants, loads it (BPF_PROG_LOAD,
// BPF_PROG_TYPE_CGROUP_DEVICE) and binds rules to it (BPF_PROG_BIND_MAP) so the record lives
// exactly as long as the program.
func loadProgram(static []Rule, grants, rules *ebpf.Map) (*ebpf.Program, error) {
	insns, err := Compile(static, CompileOptions{Grants: true})
	if err != nil {
		return nil, err
	}
	if err := insns.AssociateMap(GrantsMap, grants); err != nil {
		return nil, fmt.Errorf("associate grants map: %w", err)
	}
	removeMemlock()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: progName, Type: ebpf.CGroupDevice, License: license, Instructions: insns,
	})
	if err != nil {
		return nil, fmt.Errorf("load device program: %w: %w", ErrNoBPF, err)
	}
	if err := prog.BindMap(rules); err != nil {
		prog.Close()
		return nil, fmt.Errorf("bind rules map: %w", err)
	}
	return prog, nil
}

// attached is one program found on a cgroup. Ours have grants and rules set.
type attached struct {
	id     ebpf.ProgramID
	prog   *ebpf.Program
	grants *ebpf.Map
	rules  *ebpf.Map
}

func (a *attached) ours() bool { return a.grants != nil }

// Close releases the fds (nil-safe); the attachment itself is untouched.
func (a *attached) Close() {
	if a == nil {
		return
	}
	a.prog.Close()
	a.grants.Close()
	a.rules.Close()
}

// attachedPrograms lists the device programs attached directly to cg, ours recognised by
// program name and the names and shapes of its two maps.
// Equivalent to: bpftool cgroup show <cgroup> (BPF_PROG_QUERY, then BPF_PROG_GET_FD_BY_ID,
// BPF_MAP_GET_FD_BY_ID).
func attachedPrograms(cg *os.File) ([]*attached, error) {
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return nil, fmt.Errorf("query device programs: %w: %w", ErrNoBPF, err)
	}
	var out []*attached
	for _, p := range res.Programs {
		a, err := inspect(p.ID)
		if err != nil {
			closeAll(out)
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func closeAll(as []*attached) {
	for _, a := range as {
		a.Close()
	}
}

func inspect(id ebpf.ProgramID) (*attached, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if err != nil {
		return nil, fmt.Errorf("open device program %d: %w", id, err)
	}
	a := &attached{id: id, prog: prog}
	info, err := prog.Info()
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("inspect device program %d: %w", id, err)
	}
	mapIDs, _ := info.MapIDs()
	if info.Name != progName || len(mapIDs) != 2 {
		return a, nil
	}
	var grants, rules *ebpf.Map
	for _, mid := range mapIDs {
		m, name, err := openMap(mid)
		if err != nil {
			grants.Close()
			rules.Close()
			prog.Close()
			return nil, err
		}
		switch {
		case name == grantsMapName && grants == nil:
			grants = m
		case name == rulesMapName && rules == nil:
			rules = m
		default:
			m.Close()
		}
	}
	if grants == nil || rules == nil {
		grants.Close()
		rules.Close()
		return a, nil // a program with our name but not our maps: treat as foreign
	}
	a.grants, a.rules = grants, rules
	return a, nil
}

// openMap opens a map by id and returns its name if it has our key and value shape.
func openMap(id ebpf.MapID) (*ebpf.Map, string, error) {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return nil, "", fmt.Errorf("open map %d: %w", id, err)
	}
	info, err := m.Info()
	if err != nil {
		m.Close()
		return nil, "", fmt.Errorf("inspect map %d: %w", id, err)
	}
	if info.Type != ebpf.Hash || info.KeySize != mapKeySize || info.ValueSize != mapValueSize {
		return m, "", nil
	}
	return m, info.Name, nil
}

// readRules returns the static rules recorded in a rules map, canonical.
func readRules(m *ebpf.Map) ([]Rule, error) {
	var (
		k     mapKey
		v     uint32
		rules []Rule
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		r, static, err := decodeEntry(k, v)
		if err != nil {
			return nil, err
		}
		if !static {
			return nil, fmt.Errorf("read rules map: grant entry %+v: %w", k, ErrInvalidRule)
		}
		rules = append(rules, r)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read rules map: %w", err)
	}
	return Canonical(rules), nil
}

// attachProgram attaches prog to cg with BPF_F_ALLOW_MULTI, atomically replacing old when it
// is not nil (BPF_F_REPLACE): there is no moment with neither or both programs attached.
// Equivalent to: bpftool cgroup attach <cgroup> device id <prog> multi [replace <old>]
func attachProgram(cg *os.File, prog, old *ebpf.Program) error {
	opts := link.RawAttachProgramOptions{
		Target: int(cg.Fd()), Program: prog, Attach: ebpf.AttachCGroupDevice,
		Flags: unix.BPF_F_ALLOW_MULTI,
	}
	if old != nil {
		opts.Anchor = link.ReplaceProgram(old)
	}
	if err := link.RawAttachProgram(opts); err != nil {
		return fmt.Errorf("attach device program: %w", err)
	}
	return nil
}

// detachProgram detaches prog from cg.
// Equivalent to: bpftool cgroup detach <cgroup> device id <prog>
func detachProgram(cg *os.File, prog *ebpf.Program) error {
	err := link.RawDetachProgram(link.RawDetachProgramOptions{
		Target: int(cg.Fd()), Program: prog, Attach: ebpf.AttachCGroupDevice,
	})
	if err != nil {
		return fmt.Errorf("detach device program: %w", err)
	}
	return nil
}

// isNotExist reports a kernel object that is already gone.
func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENOENT)
}
