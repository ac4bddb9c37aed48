package devices

import (
	"os"
	"path/filepath"
	"testing"
)

// TestProbeUserfaultfd: the probe reads vm.unprivileged_userfaultfd (from files here: the real
// sysctl is global, and the controllers' post-copy test sets it while it runs).
func TestProbeUserfaultfd(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string // "": no such file (before Linux 5.2: everyone may)
		want    bool
	}{{"0\n", false}, {"1\n", true}, {"", true}} {
		path := filepath.Join(dir, "absent")
		if tc.content != "" {
			path = filepath.Join(dir, "v"+tc.content[:1])
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ok, err := unprivilegedUserfaultfd(path)
		if ok != tc.want || (err == nil) != tc.want {
			t.Errorf("%q: %v, %v; want %v", tc.content, ok, err, tc.want)
		}
	}
}
