package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// vmletHome is the folder vmlet keeps its node state in by default (vmlet agent's state, vmlet
// local's state below it): vmlet's own, unlike any other ancestor of a --state-dir.
const vmletHome = "/var/lib/vmlet"

// openStateDir makes dir (and, when dir lies beneath home, home itself) searchable by others
// (o+x, no listing): the launchers' unprivileged user passes through to the image cache and
// volume folders inside. Versions before the launchers ran unprivileged made home 0700; other
// ancestors are left as they are (the storage check then names the one in the way).
//
// Equivalent to: mkdir -p DIR && chmod 0711 DIR && chmod o+x HOME
func openStateDir(dir, home string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("make state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("make state dir: %w", err)
	}
	rel, err := filepath.Rel(home, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	fi, err := os.Stat(home)
	if err != nil {
		return fmt.Errorf("open state dir: %w", err)
	}
	if fi.Mode().Perm()&0o001 == 0 {
		if err := os.Chmod(home, fi.Mode().Perm()|0o001); err != nil {
			return fmt.Errorf("open state dir: %w", err)
		}
	}
	return nil
}
