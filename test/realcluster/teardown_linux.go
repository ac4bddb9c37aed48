package realcluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

// teardown removes everything a cluster at l made, running or crashed, and is a no-op when
// nothing is there. With keepLogs the daemon logs are moved to /var/tmp first.
func teardown(l layout, log io.Writer, keepLogs bool) error {
	var errs []error
	ids := shimIDs(l)
	if n, err := killAll(l); err != nil {
		errs = append(errs, err)
	} else if n > 0 {
		fmt.Fprintf(log, "realcluster: killed %d processes\n", n)
	}
	if err := unmountAll(l); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, deleteChains()...)
	if err := deleteLinks(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroups(); err != nil {
		errs = append(errs, err)
	}
	if keepLogs {
		if _, err := os.Stat(l.logs()); err == nil {
			dst := fmt.Sprintf("/var/tmp/vmlet-cluster-logs-%d", time.Now().Unix())
			if err := os.Rename(l.logs(), dst); err == nil {
				fmt.Fprintf(log, "realcluster: daemon logs kept in %s\n", dst)
			}
		}
	}
	errs = append(errs, removeGlobals(l, ids)...)
	errs = append(errs, removeMadeHostPaths(l)...)
	errs = append(errs, removeFiles(l)...)
	return errors.Join(errs...)
}

// clusterPIDs are the processes whose command line names the layout, and those in the kubepods
// cgroups (containers).
func clusterPIDs(l layout) []int {
	self, parent := os.Getpid(), os.Getppid()
	seen := map[int]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self || pid == parent {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		for _, m := range l.marks() {
			if strings.Contains(cmd, m) {
				seen[pid] = true
			}
		}
	}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h.path, CgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid != self {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids
}

// killAll SIGKILLs the cluster's processes until none is left (30 s at most).
func killAll(l layout) (int, error) {
	killed := map[int]bool{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := clusterPIDs(l)
		var alive []int
		for _, p := range pids {
			if err := syscall.Kill(p, syscall.SIGKILL); err == nil {
				killed[p] = true
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return len(killed), nil
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("kill cluster processes: %v still alive", alive)
		}
		time.Sleep(100 * time.Millisecond) // the kernel finishes the SIGKILLs; re-scan
	}
}

// clusterMounts are the mount points under the layout, deepest first.
func clusterMounts(l layout) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		mp := mountinfo.Unescape(fs[4])
		for _, root := range []string{l.Root, l.Run} {
			if mp == root || strings.HasPrefix(mp, root+"/") {
				out = append(out, mp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return slices.Compact(out)
}

func unmountAll(l layout) error {
	for range 10 {
		mps := clusterMounts(l)
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			_ = unix.Unmount(mp, unix.MNT_DETACH)
		}
	}
	if mps := clusterMounts(l); len(mps) > 0 {
		return fmt.Errorf("unmount: %d mounts left, e.g. %s", len(mps), mps[0])
	}
	return nil
}

func hasChainPrefix(s string) bool {
	for _, p := range chainPrefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// chains lists a table's chains (builtin and user) as iptables -S prints them.
func listRules(cmd, table string) ([]string, error) {
	out, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
	if err != nil {
		return nil, fmt.Errorf("%s -t %s -S: %w", cmd, table, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n"), nil
}

// ourChains are the KUBE-*, CNI-* and VMLET-RC-* chains of a table.
func ourChains(cmd, table string) ([]string, error) {
	lines, err := listRules(cmd, table)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ln := range lines {
		fs := strings.Fields(ln)
		if len(fs) >= 2 && fs[0] == "-N" && hasChainPrefix(fs[1]) {
			out = append(out, fs[1])
		}
	}
	return out, nil
}

// deleteChains removes, in iptables and ip6tables, every rule of another chain that jumps to one
// of our chains (by rule number, last first), then flushes and deletes our chains.
func deleteChains() []error {
	var errs []error
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			continue
		}
		for _, table := range iptablesTables {
			lines, err := listRules(cmd, table)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			idx := map[string]int{}
			var del [][2]string // chain, rule number
			var ours []string
			for _, ln := range lines {
				fs := strings.Fields(ln)
				if len(fs) < 2 {
					continue
				}
				switch fs[0] {
				case "-N":
					if hasChainPrefix(fs[1]) {
						ours = append(ours, fs[1])
					}
				case "-A":
					idx[fs[1]]++
					if hasChainPrefix(fs[1]) {
						continue
					}
					if j := slices.Index(fs, "-j"); j > 0 && j+1 < len(fs) && hasChainPrefix(fs[j+1]) {
						del = append(del, [2]string{fs[1], strconv.Itoa(idx[fs[1]])})
					}
				}
			}
			for i := len(del) - 1; i >= 0; i-- {
				if out, err := exec.Command(cmd, "-w", "-t", table, "-D", del[i][0], del[i][1]).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s -D %s %s: %w: %s", cmd, table, del[i][0], del[i][1], err, out))
				}
			}
			for _, c := range ours {
				_ = exec.Command(cmd, "-w", "-t", table, "-F", c).Run()
			}
			for _, c := range ours {
				if out, err := exec.Command(cmd, "-w", "-t", table, "-X", c).CombinedOutput(); err != nil {
					if left, lerr := ourChains(cmd, table); lerr == nil && !slices.Contains(left, c) {
						continue // gone already
					}
					errs = append(errs, fmt.Errorf("%s -t %s -X %s: %w: %s", cmd, table, c, err, out))
				}
			}
		}
	}
	return errs
}

// deleteLinks removes the bridge and any veth still enslaved to it.
func deleteLinks() error {
	br, err := netlink.LinkByName(BridgeName)
	if err != nil {
		return nil // not there
	}
	links, _ := netlink.LinkList()
	for _, ln := range links {
		if ln.Attrs().MasterIndex == br.Attrs().Index {
			_ = netlink.LinkDel(ln)
		}
	}
	if err := netlink.LinkDel(br); err != nil {
		return fmt.Errorf("delete bridge %s: %w", BridgeName, err)
	}
	return nil
}

type hierarchy struct {
	path   string
	cpuset bool
}

// cgroupHierarchies are the mounted cgroup v1 and v2 hierarchies (found by filesystem type).
func cgroupHierarchies() []hierarchy {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []hierarchy
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		ln := sc.Text()
		sep := strings.Index(ln, " - ")
		if sep < 0 {
			continue
		}
		pre, post := strings.Fields(ln[:sep]), strings.Fields(ln[sep+3:])
		if len(pre) < 5 || len(post) < 3 || (post[0] != "cgroup" && post[0] != "cgroup2") {
			continue
		}
		h := hierarchy{path: mountinfo.Unescape(pre[4]), cpuset: post[0] == "cgroup" && slices.Contains(strings.Split(post[2], ","), "cpuset")}
		if !slices.ContainsFunc(out, func(o hierarchy) bool { return o.path == h.path }) {
			out = append(out, h)
		}
	}
	return out
}

// removeCgroups removes CgroupRoot and everything below it in every hierarchy, deepest first.
func removeCgroups() error {
	var left []string
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h.path, CgroupRoot)
		deadline := time.Now().Add(10 * time.Second)
		for {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			if len(dirs) == 0 {
				break
			}
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = unix.Rmdir(dirs[i])
			}
			if _, err := os.Stat(root); err != nil {
				break
			}
			if time.Now().After(deadline) {
				left = append(left, root)
				break
			}
			time.Sleep(50 * time.Millisecond) // a killed task leaves its cgroup a moment later
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("remove cgroups: left %v", left)
	}
	return nil
}

// removeFiles removes the layout, kubelet's /var/log/containers links into it and CNI's cached
// results for the cluster's network.
func removeFiles(l layout) []error {
	var errs []error
	if ents, err := os.ReadDir("/var/log/containers"); err == nil {
		for _, e := range ents {
			p := filepath.Join("/var/log/containers", e.Name())
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, l.Root+"/") {
				if err := os.Remove(p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, pat := range cniCacheGlobs {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, d := range []string{l.Root, l.Run} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// cniCacheGlobs are libcni's result cache (its default /var/lib/cni; containerd 1.6 sets no
// other) and host-local's default folder for the cluster's network.
var cniCacheGlobs = []string{"/var/lib/cni/results/vmlet-cluster-*", "/var/lib/cni/networks/vmlet-cluster"}

// removeMadeHostPaths removes the machine's folders prepareHost made, innermost first, when
// they are empty. One that is not holds the first node's files (it uses the machine's own
// folders): they are its user's to remove (see PrivateHostPaths), and the folder stays.
func removeMadeHostPaths(l layout) []error {
	b, err := os.ReadFile(l.madeHostPaths())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []error{err}
	}
	var errs []error
	made := strings.Fields(string(b))
	for i := len(made) - 1; i >= 0; i-- {
		err := os.Remove(made[i])
		if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
			errs = append(errs, err)
		}
	}
	return errs
}
