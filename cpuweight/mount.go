package cpuweight

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

// mounts is what mountinfo says about cgroup file systems.
type mounts struct {
	v1CPU string // mount point of the cgroup-v1 hierarchy with the cpu controller, or ""
	v2    string // mount point of cgroup2, or ""
}

// parseMounts reads /proc/self/mountinfo (proc(5): "id parent major:minor root mountpoint
// options [optional…] - fstype source superoptions"). A v1 hierarchy has the cpu controller
// when its super options list "cpu" (alone, or co-mounted as "cpu,cpuacct"). Mounts of a
// hierarchy's root ("/") are preferred over bind mounts of a subtree. Pure, for tests.
func parseMounts(r io.Reader) (mounts, error) {
	var m, sub mounts
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1<<20)
	for s.Scan() {
		left, right, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		dst := &m
		if lf[3] != "/" {
			dst = &sub
		}
		mnt := mountinfo.Unescape(lf[4])
		switch {
		case rf[0] == "cgroup2" && dst.v2 == "":
			dst.v2 = mnt
		case rf[0] == "cgroup" && dst.v1CPU == "" && slices.Contains(strings.Split(rf[2], ","), "cpu"):
			dst.v1CPU = mnt
		}
	}
	if err := s.Err(); err != nil {
		return mounts{}, fmt.Errorf("read mountinfo: %w", err)
	}
	if m.v1CPU == "" {
		m.v1CPU = sub.v1CPU
	}
	if m.v2 == "" {
		m.v2 = sub.v2
	}
	return m, nil
}
