package realcluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// CrashForTest plays a crash of the process that ran Start: the control-plane daemons and
// containerd die (SIGKILL) and the lock is let go, while the shims, the pods, their mounts,
// cgroups, iptables chains and the bridge stay, as they would. It returns how many it killed.
func (c *Cluster) CrashForTest() (killed int, left []string) {
	n := 0
	for _, p := range daemonsAlive(c.l) {
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			n++
		}
	}
	_ = waitFor(context.Background(), 10*time.Second, "daemons dead", func() bool { return len(daemonsAlive(c.l)) == 0 })
	left = residue(c.l) // under the lock: nobody else's cluster yet
	_ = c.lock.Close()
	c.lock = nil
	return n, left
}

// daemonsAlive are the cluster's processes other than shims and containers.
func daemonsAlive(l layout) []int {
	var out []int
	for _, p := range clusterPIDs(l) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
		if len(cmd) == 0 || strings.Contains(string(cmd), "containerd-shim") || strings.Contains(string(cg), CgroupRoot+"/") {
			continue
		}
		out = append(out, p)
	}
	return out
}
