package devices

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

// cgroup2MountIn returns the mount point of the cgroup2 filesystem listed in r, in the
// /proc/self/mountinfo format (proc(5)): "id parent major:minor root mountpoint options
// [optional…] - fstype source superoptions". A mount of the hierarchy's root ("/") is preferred
// over bind mounts of a subtree. It is pure, for tests.
func cgroup2MountIn(r io.Reader) (string, error) {
	var sub string
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1<<20)
	for s.Scan() {
		left, right, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 1 || rf[0] != "cgroup2" {
			continue
		}
		mnt := mountinfo.Unescape(lf[4])
		if lf[3] == "/" {
			return mnt, nil
		}
		if sub == "" {
			sub = mnt
		}
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	if sub == "" {
		return "", ErrNoCgroup2
	}
	return sub, nil
}
