package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// deathSignals is what etcd and kube-apiserver get when the vmlet that started them dies.
// SIGTERM lets etcd close its database and release its locks at once. kube-apiserver holds no
// state, and on SIGTERM it runs its graceful shutdown, which talks to etcd (the endpoint lease)
// while etcd is stopping too: on a loaded machine it was still alive 30 s after a SIGKILL of
// vmlet (TestLocalKill9 in CI), so it gets SIGKILL. A leftover is stopped by the next start.
var deathSignals = map[string]string{"etcd": "TERM", "kube-apiserver": "KILL"}

// wrapperScript is a shell script that runs binary with a parent-death signal:
// `setpriv --pdeathsig SIGNAL -- BINARY ARGS...`. The signal survives the exec and is sent when
// the thread that started the script ends (StartControlPlane starts it from a thread that lives
// as long as the control plane).
func wrapperScript(binary, signal string) string {
	return fmt.Sprintf(`#!/bin/sh
# Written by vmlet local: %[1]s dies with the vmlet that started it (prctl PR_SET_PDEATHSIG).
exec setpriv --pdeathsig %[2]s -- %[3]s "$@"
`, filepath.Base(binary), signal, shellQuote(binary))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeWrappers writes dir/etcd and dir/kube-apiserver, the wrappers of the binaries in assets.
func writeWrappers(dir, assets string) (etcd, apiserver string, err error) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		return "", "", fmt.Errorf("find setpriv (util-linux), which gives the control plane a parent-death signal: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("make wrapper folder: %w", err)
	}
	var paths []string
	for _, name := range []string{"etcd", "kube-apiserver"} {
		bin := filepath.Join(assets, name)
		if _, err := os.Stat(bin); err != nil {
			return "", "", fmt.Errorf("find control plane binary: %w", err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p+".tmp", []byte(wrapperScript(bin, deathSignals[name])), 0o700); err != nil {
			return "", "", fmt.Errorf("write %s wrapper: %w", name, err)
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return "", "", fmt.Errorf("write %s wrapper: %w", name, err)
		}
		paths = append(paths, p)
	}
	return paths[0], paths[1], nil
}
