package realcluster

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// CrashForTest plays a crash of the process that ran Start: the control-plane daemons and
// containerd die (SIGKILL) and the lock is let go, while the shims, the pods, their mounts,
// cgroups, iptables chains and the bridge stay, as they would. It returns how many it killed.
func (c *Cluster) CrashForTest() int {
	n := 0
	for _, p := range clusterPIDs(c.l) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
		if strings.Contains(string(cmd), "containerd-shim") || strings.Contains(string(cg), CgroupRoot+"/") {
			continue
		}
		if syscall.Kill(p, syscall.SIGKILL) == nil {
			n++
		}
	}
	_ = c.lock.Close()
	c.lock = nil
	return n
}
