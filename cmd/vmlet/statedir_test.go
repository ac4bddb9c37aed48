package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenStateDir: a state folder beneath vmlet's own home gets home made o+x (an older vmlet
// left /var/lib/vmlet 0700 and the launchers' user could not reach the image cache: `make run`
// failed after the upgrade); a state folder elsewhere leaves its ancestors alone.
func TestOpenStateDir(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "vmlet")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(root, "other")
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir, ancestor string
		want          os.FileMode
	}{
		{filepath.Join(home, "local"), home, 0o701},
		{filepath.Join(elsewhere, "state"), elsewhere, 0o700},
	} {
		if err := openStateDir(tt.dir, home); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]os.FileMode{tt.dir: 0o711, tt.ancestor: tt.want} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s: mode %o, want %o", p, got, want)
			}
		}
	}
}
