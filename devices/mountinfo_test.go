package devices

import (
	"errors"
	"strings"
	"testing"
)

func TestCgroup2MountIn(t *testing.T) {
	hybrid := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	pure := `25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	bindFirst := `50 1 0:22 /kubepods /host\040cgroup rw - cgroup2 cgroup2 rw
51 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`
	onlyBind := `50 1 0:22 /kubepods /host\040cgroup rw - cgroup2 cgroup2 rw
`
	tests := []struct{ name, in, want string }{
		{"hybrid", hybrid, "/sys/fs/cgroup/unified"},
		{"pure v2 with optional fields", pure, "/sys/fs/cgroup"},
		{"root mount preferred over bind", bindFirst, "/sys/fs/cgroup"},
		{"escaped subtree bind", onlyBind, "/host cgroup"},
	}
	for _, tt := range tests {
		got, err := cgroup2MountIn(strings.NewReader(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if _, err := cgroup2MountIn(strings.NewReader("36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n")); !errors.Is(err, ErrNoCgroup2) {
		t.Errorf("v1 only: err = %v, want ErrNoCgroup2", err)
	}
}
