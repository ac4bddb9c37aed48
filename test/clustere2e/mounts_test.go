package clustere2e_test

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vmlet/vmlet/internal/mountinfo"
)

// unmountUnder detaches every mount below dir, deepest first, and logs each: a test that ends
// while an agent is still tearing a VMI down (its processes are stopped first) leaves the pod's
// network namespace bound in the launcher's run folder, which would outlive the test's folder.
// Tests that need a node clean say so themselves (waitNodeClean).
func unmountUnder(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Errorf("read mounts: %v", err)
		return
	}
	defer f.Close()
	var mps []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) > 4 {
			if mp := mountinfo.Unescape(fs[4]); strings.HasPrefix(mp, dir+"/") {
				mps = append(mps, mp)
			}
		}
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s, left by the test: %v", mp, err)
			continue
		}
		t.Logf("unmounted %s, left when the test ended", mp)
	}
}
