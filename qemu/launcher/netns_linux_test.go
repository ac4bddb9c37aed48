package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"testing"
	"time"
)

// testNetns creates a network namespace named prefix-<random> (removed when the test ends) and
// returns its name and a runner of `ip` commands that fails the test on error.
// Equivalent to: ip netns add NAME; ... ; ip netns del NAME
func testNetns(t *testing.T, prefix string) (string, func(args ...string)) {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	ns := prefix + "-" + hex.EncodeToString(b)
	ip := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { ip("netns", "del", ns) })
	return ns, ip
}
