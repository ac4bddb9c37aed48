package leakaudit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

// collect reads every kind in s, each object named by a key that stays the same while the
// object lives (a pid with its start time, a link with its index, a path).
func collect(s Scope) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	for _, k := range Kinds {
		out[k] = map[string]bool{}
	}
	pids, err := processes(s, out[Processes])
	if err != nil {
		return nil, fmt.Errorf("audit processes: %w", err)
	}
	members, err := cgroups(s, out[Cgroups], out[BPFPrograms])
	if err != nil {
		return nil, fmt.Errorf("audit cgroups: %w", err)
	}
	for _, pid := range members {
		if !slices.Contains(pids, pid) {
			comm, start := procStat(pid)
			out[Processes][fmt.Sprintf("%s (%s) start %s", pid, comm, start)] = true
			pids = append(pids, pid)
		}
	}
	for _, pid := range append([]string{"self"}, pids...) {
		heldPrograms(pid, out[BPFPrograms])
	}
	for _, d := range s.NetnsDirs {
		ents, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("audit netns: %w", err)
		}
		for _, e := range ents {
			out[Netns][filepath.Join(d, e.Name())] = true
		}
	}
	if s.Netns != "" {
		if err := netnsObjects(s, out); err != nil {
			return nil, fmt.Errorf("audit node netns %s: %w", s.Netns, err)
		}
	}
	if err := mounts(append(append([]string(nil), s.Dirs...), s.NetnsDirs...), out[Mounts]); err != nil {
		return nil, fmt.Errorf("audit mounts: %w", err)
	}
	for _, d := range s.Dirs {
		if err := files(d, out[Files]); err != nil {
			return nil, fmt.Errorf("audit files: %w", err)
		}
	}
	return out, nil
}

// processes adds "pid (comm) start T" for every process whose command line names one of
// s.Processes and returns their pids. Equivalent to: pgrep -af PATTERN.
func processes(s Scope, into map[string]bool) ([]string, error) {
	if len(s.Processes) == 0 {
		return nil, nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	self := strconv.Itoa(os.Getpid())
	var pids []string
	for _, e := range ents {
		pid := e.Name()
		if _, err := strconv.Atoi(pid); err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		if err != nil || len(b) == 0 { // gone, or a zombie / kernel thread
			continue
		}
		cmd := strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
		if !containsAny(cmd, s.Processes) {
			continue
		}
		comm, start := procStat(pid)
		into[fmt.Sprintf("%s (%s) start %s", pid, comm, start)] = true
		pids = append(pids, pid)
	}
	return pids, nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if sub != "" && strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// procStat returns a process's comm and start time (field 22 of /proc/PID/stat).
func procStat(pid string) (comm, start string) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "?", "?"
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "?", "?"
	}
	comm = s[open+1 : end]
	fields := strings.Fields(s[end+1:])
	if len(fields) > 19 { // fields[0] is field 3 (state)
		start = fields[19]
	}
	return comm, start
}

// cgroups adds every folder below s.Cgroups, and the device programs attached to each of
// them and to the roots, and returns the processes in those folders (cgroup.procs).
// Equivalent to: find ROOT -mindepth 1 -type d; bpftool cgroup show; cat cgroup.procs.
func cgroups(s Scope, into, progs map[string]bool) ([]string, error) {
	var members []string
	for _, root := range s.Cgroups {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			if p != root {
				into[p] = true
				if b, err := os.ReadFile(filepath.Join(p, "cgroup.procs")); err == nil {
					members = append(members, strings.Fields(string(b))...)
				}
			}
			attachedPrograms(p, progs)
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return members, nil
}

func attachedPrograms(cgroup string, into map[string]bool) {
	f, err := os.Open(cgroup)
	if err != nil {
		return // removed meanwhile
	}
	defer f.Close()
	res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: ebpf.AttachCGroupDevice})
	if err != nil {
		return
	}
	for _, p := range res.Programs {
		into[fmt.Sprintf("prog %d (attached to %s)", p.ID, cgroup)] = true
	}
}

// heldPrograms adds the BPF programs process pid holds open (/proc/PID/fdinfo prog_id).
// Equivalent to: bpftool prog show (its pids column).
func heldPrograms(pid string, into map[string]bool) {
	fdDir := filepath.Join("/proc", pid, "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil || target != "anon_inode:bpf-prog" {
			continue
		}
		if id := fdinfoField(filepath.Join("/proc", pid, "fdinfo", e.Name()), "prog_id"); id != "" {
			into[fmt.Sprintf("prog %s (held by pid %s)", id, pid)] = true
		}
	}
}

func fdinfoField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// netnsObjects adds the links, taps and nftables tables of s.Netns. Equivalent to:
// ip -n NS link; nft -n NS list tables.
func netnsObjects(s Scope, out map[string]map[string]bool) error {
	h, err := netns.GetFromPath(s.Netns)
	if err != nil {
		return err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return err
	}
	defer nh.Close()
	links, err := nh.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		a := l.Attrs()
		if s.IgnoreLink != nil && s.IgnoreLink(a.Name) {
			continue
		}
		key := fmt.Sprintf("%s (index %d)", a.Name, a.Index)
		if l.Type() == "tuntap" {
			out[Taps][key] = true
		} else {
			out[Links][key] = true
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		return err
	}
	tables, err := c.ListTables()
	if err != nil {
		return err
	}
	for _, t := range tables {
		out[NftTables][fmt.Sprintf("%s (family %d)", t.Name, t.Family)] = true
	}
	return nil
}

// mounts adds the mount points below any of dirs (/proc/self/mountinfo field 5).
func mounts(dirs []string, into map[string]bool) error {
	if len(dirs) == 0 {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := mountinfo.Unescape(fields[4])
		for _, d := range dirs {
			if below(mp, d) {
				into[fmt.Sprintf("%s (mount %s)", mp, fields[0])] = true
				break
			}
		}
	}
	return sc.Err()
}

func below(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// files adds every file and folder below dir (not dir itself), symlinks not followed.
func files(dir string, into map[string]bool) error {
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while walking
			}
			return err
		}
		if p != dir {
			into[p] = true
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
