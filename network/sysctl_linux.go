package network

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// setSysctl writes value to /proc/sys/KEY in the network namespace at nsPath (empty: the
// process's own). /proc/sys/net belongs to the namespace of the thread that opens it, so this
// runs on a thread switched into nsPath. key uses slashes ("net/ipv4/ip_forward"), so
// interface names with dots stay intact. Writing the current value again is harmless.
//
// Equivalent to: `ip netns exec NS sysctl -w KEY=VALUE`.
func setSysctl(nsPath, key, value string) error {
	err := doInNetns(nsPath, func() error {
		p := filepath.Join("/proc/sys", key)
		if cur, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(cur)) == value {
			return nil
		}
		return os.WriteFile(p, []byte(value), 0o644)
	})
	if err != nil {
		return fmt.Errorf("set sysctl %s=%s: %w", key, value, err)
	}
	return nil
}
