package testguest

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// OSRelease is the test guest's /etc/os-release (test/assets/guest/os-release) as key/value
// pairs, unquoted: what guest-get-osinfo reports (ID, NAME, PRETTY_NAME, VERSION, VERSION_ID).
func OSRelease(tb testing.TB) map[string]string {
	tb.Helper()
	root, err := repoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "test/assets/guest/os-release"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			v = u
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// KernelRelease is the test guest's kernel release (uname -r), from the build's manifest.
func KernelRelease(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Assets(tb).Dir, "manifest.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "kernel "); ok {
			return v
		}
	}
	tb.Fatal("manifest.txt names no kernel")
	return ""
}
