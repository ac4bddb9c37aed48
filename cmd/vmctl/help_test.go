package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestVMCommandsHelp: every VM command's help has examples, the way NAME is addressed and the
// exit statuses; under the plugin name they say "kubectl vmctl".
func TestVMCommandsHelp(t *testing.T) {
	for _, verb := range []string{"console", "vnc", "vnc screenshot", "qmp", "qmp-log", "pause", "unpause", "migrate",
		"migrate-cancel", "guestosinfo", "userlist", "fslist", "port-forward", "ssh"} {
		args := append(strings.Fields(verb), "--help")
		r := vmctl(t, &fakeClock{}, args...)
		for _, want := range []string{"Examples:\n  vmctl " + verb, "NAME is a VirtualMachineInstance in -n NAMESPACE", "  6  forbidden (HTTP 403", "--kubeconfig string"} {
			if r.code != exitOK || !strings.Contains(r.stdout, want) {
				t.Errorf("%s --help: exit %d, no %q in:\n%s", verb, r.code, want, r.stdout)
			}
		}
		var out bytes.Buffer
		c := newCLI(nil, &out, &out)
		c.plugin = true
		if code := run(context.Background(), c, args); code != exitOK || !strings.Contains(out.String(), "Examples:\n  kubectl vmctl "+verb) ||
			!strings.Contains(out.String(), "Usage:\n  kubectl vmctl "+verb) {
			t.Errorf("%s --help as a plugin: exit %d\n%s", verb, code, out.String())
		}
	}
}
