package cpuweight

import (
	"strings"
	"testing"
)

// hybrid is this kind of machine's /proc/self/mountinfo (cgroup lines).
const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
37 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMounts(t *testing.T) {
	for _, c := range []struct {
		name, info string
		want       mounts
	}{
		{"hybrid", hybrid, mounts{v1CPU: "/sys/fs/cgroup/cpu", v2: "/sys/fs/cgroup/unified"}},
		{"cpuacct is not cpu", "33 31 0:30 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n", mounts{}},
		{"co-mounted", `30 23 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
`, mounts{v1CPU: "/sys/fs/cgroup/cpu,cpuacct"}},
		{"pure v2", "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n", mounts{v2: "/sys/fs/cgroup"}},
		{"root mount preferred", `50 23 0:26 /kubepods /mnt/sub rw - cgroup cgroup rw,cpu
51 23 0:26 / /mnt/my\040cpu rw - cgroup cgroup rw,cpu
`, mounts{v1CPU: "/mnt/my cpu"}},
		{"subtree only", "50 23 0:26 /kubepods /mnt/sub rw - cgroup cgroup rw,cpu\n", mounts{v1CPU: "/mnt/sub"}},
	} {
		got, err := parseMounts(strings.NewReader(c.info))
		if err != nil || got != c.want {
			t.Errorf("%s: parseMounts = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
