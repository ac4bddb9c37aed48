package controllers_test

import (
	"strings"
	"testing"

	"github.com/vmlet/vmlet/test/leakaudit"
)

// nodeScope is everything the package's test node gives VMs (leakaudit.Scope): the run and
// volume roots (and extra folders, e.g. a test's own volume root or host disk root), the
// launchers' cgroups and their device programs, the pod namespaces, the node netns' links,
// taps and nftables tables (the test clients' "up-" veths aside), and the launcher and QEMU
// processes (named by the launcher binary or a socket in the run root).
func nodeScope(extraDirs ...string) leakaudit.Scope {
	return leakaudit.Scope{
		Dirs:       append([]string{runRoot, volumeRoot}, extraDirs...),
		Cgroups:    []string{cgroupParent},
		Netns:      testNet.node,
		NetnsDirs:  []string{testNet.cfg.NetnsDir},
		Processes:  []string{launcherBinary, runRoot},
		IgnoreLink: func(name string) bool { return name == "lo" || strings.HasPrefix(name, "up-") },
	}
}

// auditNode snapshots the test node before a test's VMs (nodeScope).
func auditNode(t testing.TB, extraDirs ...string) *leakaudit.Snapshot {
	t.Helper()
	s, err := leakaudit.Take(nodeScope(extraDirs...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
