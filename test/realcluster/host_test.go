package realcluster

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMadeHostPaths: the bind-mount targets a secondary node needs are made 0755 on the machine
// and listed, and the teardown removes those it made that are empty, innermost first, keeping
// one that holds something (the first node's files) and every folder that was there before.
func TestMadeHostPaths(t *testing.T) {
	root := t.TempDir()
	l := layout{Root: filepath.Join(root, "root"), Run: filepath.Join(root, "run")}
	if err := os.MkdirAll(l.Run, 0o700); err != nil {
		t.Fatal(err)
	}
	pre := filepath.Join(root, "pre")
	if err := os.Mkdir(pre, 0o700); err != nil {
		t.Fatal(err)
	}
	a, ab, abc := filepath.Join(pre, "a"), filepath.Join(pre, "a", "b"), filepath.Join(pre, "a", "b", "c")
	made, err := mkdirAllMade(abc, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a, ab, abc}; !slices.Equal(made, want) {
		t.Fatalf("made %q, want %q", made, want)
	}
	for _, d := range made {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o055 != 0o055 {
			t.Fatalf("%s: %v, mode %v: others cannot search it", d, err, fi.Mode())
		}
	}
	if again, err := mkdirAllMade(abc, 0o755); err != nil || len(again) != 0 {
		t.Fatalf("second call made %q (%v), want nothing", again, err)
	}
	if err := os.WriteFile(l.madeHostPaths(), []byte(strings.Join(made, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(ab, "first-node-file")
	if err := os.WriteFile(kept, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := removeMadeHostPaths(l); len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, err := os.Stat(abc); !os.IsNotExist(err) {
		t.Fatalf("%s left (%v)", abc, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("a folder holding a file lost it: %v", err)
	}
	if err := os.Remove(kept); err != nil {
		t.Fatal(err)
	}
	if errs := removeMadeHostPaths(l); len(errs) > 0 {
		t.Fatal(errs)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("%s left (%v)", a, err)
	}
	if _, err := os.Stat(pre); err != nil {
		t.Fatalf("a folder that was there before went: %v", err)
	}
	if errs := removeMadeHostPaths(layout{Run: filepath.Join(root, "none")}); len(errs) > 0 {
		t.Fatalf("a layout without the list: %v", errs)
	}
}
