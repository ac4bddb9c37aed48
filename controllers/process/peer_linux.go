package process

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vmlet/vmlet/devices"
	"github.com/vmlet/vmlet/qemu/launcher"
)

// PeerCheck accepts only a process of launcher id's own cgroup (or below it) as the listener
// on its socket: the run folder belongs to the launchers' user, who could put another socket
// there (another VM's, by symlink or hard link, or one of its own); the cgroup is the agent's.
func (r *Runtime) PeerCheck(id string) launcher.PeerCheck {
	return func(pid int) error {
		mnt, err := devices.FindCgroup2Mount()
		if err != nil {
			return err
		}
		want, err := filepath.Rel(mnt, r.cgroupPath(id))
		if err != nil {
			return err
		}
		want = "/" + want
		got, err := cgroupV2(pid)
		if err != nil {
			return err
		}
		if got != want && !strings.HasPrefix(got, want+"/") {
			return fmt.Errorf("process %d is in cgroup %s, not launcher %s's %s", pid, got, id, want)
		}
		return nil
	}
}

// cgroupV2 is pid's cgroup-v2 path ("0::/path" in /proc/PID/cgroup).
func cgroupV2(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return "", fmt.Errorf("read cgroup of %d: %w", pid, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "0::"); ok {
			return rest, nil
		}
	}
	return "", fmt.Errorf("process %d has no cgroup-v2 entry", pid)
}
