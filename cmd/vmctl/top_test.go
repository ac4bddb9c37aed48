package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vmlet/vmlet/controllers"
)

// TestTopMetrics runs `vmctl top --metrics` end to end through the command tree: two agents
// whose counters move between the scrapes (drives, interfaces, a reset, a VMI that started in
// between), the rates over the 10 s interval, sorted, in stable columns.
func TestTopMetrics(t *testing.T) {
	noKubeconfig(t)
	n1, n2 := newAgent(t, n1First, n1Second), newAgent(t, n2First, n2Second)
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	clock.onWait = func() { // the first round is over before the interval starts
		if n1.scrapes() != 1 || n2.scrapes() != 1 {
			t.Errorf("before the interval the agents served %d and %d scrapes, want 1 each", n1.scrapes(), n2.scrapes())
		}
	}
	r := vmctl(t, clock, "top", "-A", "--metrics", n2.metricsURL(), "--metrics", n1.metricsURL(), "--interval", "10s")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "top-all.golden", r.stdout)
	if diff := cmp.Diff([]time.Duration{10 * time.Second}, clock.sleeps); diff != "" {
		t.Errorf("sleeps between the scrapes (-want +got):\n%s", diff)
	}
	if n1.scrapes() != 2 || n2.scrapes() != 2 {
		t.Errorf("agents served %d and %d scrapes, want 2 each", n1.scrapes(), n2.scrapes())
	}
}

// TestTopMetricsJSON: -o json carries every figure as a number, null when unknown.
func TestTopMetricsJSON(t *testing.T) {
	noKubeconfig(t)
	n1, n2 := newAgent(t, n1First, n1Second), newAgent(t, n2First, n2Second)
	r := vmctl(t, &fakeClock{}, "top", "-A", "-o", "json", "--metrics", n1.metricsURL(), "--metrics", n2.metricsURL(), "--interval", "10s")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "top-all.json.golden", r.stdout)
	var doc topJSON
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("output is not JSON: %v", err)
	}
}

// TestTopNamespaces: kubectl's namespace rule (-n, else the context's, else default) and
// top NAME.
func TestTopNamespaces(t *testing.T) {
	noKubeconfig(t)
	n1, n2 := newAgent(t, n1First, n1Second), newAgent(t, n2First, n2Second)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// A context whose namespace is prod and whose server nothing listens on: --metrics
	// mode reads the namespace from it and never calls the server.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: prod, context: {cluster: c, user: u, namespace: prod}}]
current-context: prod
`), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := []string{"--metrics", n1.metricsURL(), "--metrics", n2.metricsURL(), "--interval", "10s"}
	names := func(out string) []string {
		var got []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			f := strings.Fields(line)
			got = append(got, f[0]+"/"+f[1]+"@"+f[2])
		}
		return got
	}
	tests := []struct {
		args []string
		want []string
	}{
		{nil, []string{"default/db@n1", "default/fresh@n2", "default/web@n1"}},
		{[]string{"-n", "prod"}, []string{"prod/api@n2"}},
		{[]string{"--kubeconfig", kubeconfig}, []string{"prod/api@n2"}},
		{[]string{"--kubeconfig", kubeconfig, "-n", "default", "web"}, []string{"default/web@n1"}},
		{[]string{"db"}, []string{"default/db@n1"}},
	}
	for _, tt := range tests {
		r := vmctl(t, &fakeClock{}, append(append([]string{"top"}, tt.args...), metrics...)...)
		if r.code != exitOK {
			t.Errorf("top %q: exit %d, stderr:\n%s", tt.args, r.code, r.stderr)
			continue
		}
		if diff := cmp.Diff(tt.want, names(r.stdout)); diff != "" {
			t.Errorf("top %q (-want +got):\n%s", tt.args, diff)
		}
	}
}

// TestTopNotFound: NAME in no agent's metrics is exit status 3 with a message saying where
// top looked; an empty namespace is not an error.
func TestTopNotFound(t *testing.T) {
	noKubeconfig(t)
	n1 := newAgent(t, n1First, n1Second)
	dead := deadAgent(t)
	r := vmctl(t, &fakeClock{}, "top", "api", "--metrics", n1.metricsURL(), "--metrics", dead)
	if r.code != exitNotFound || r.stdout != "" {
		t.Fatalf("exit %d (want %d), stdout %q", r.code, exitNotFound, r.stdout)
	}
	want := "vmctl: vmi default/api not found in the metrics of 1 agent(s); 1 did not answer (see the warnings)\n"
	if !strings.HasSuffix(r.stderr, want) {
		t.Errorf("stderr:\n%s\nwant it to end with:\n%s", r.stderr, want)
	}
	r = vmctl(t, &fakeClock{}, "top", "-n", "empty", "--metrics", n1.metricsURL())
	if r.code != exitOK || r.stdout != "" || r.stderr != "No VMIs found in empty namespace.\n" {
		t.Errorf("empty namespace: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestTopAgentDown: an agent that does not answer (first or second scrape) is a warning; the
// others are shown. When none answers, exit status 1.
func TestTopAgentDown(t *testing.T) {
	noKubeconfig(t)
	n1 := newAgent(t, n1First, n1Second)
	flaky := newAgent(t, n2First, "") // answers once, then 500
	dead := deadAgent(t)
	r := vmctl(t, &fakeClock{}, "top", "-A", "--metrics", n1.metricsURL(), "--metrics", dead, "--metrics", flaky.metricsURL(), "--interval", "10s")
	if r.code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	golden(t, "top-n1.golden", r.stdout)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "vmctl: warning: "+dead+" did not answer: scrape: Get ") ||
		lines[1] != "vmctl: warning: "+flaky.metricsURL()+" did not answer the second scrape: scrape: HTTP 500 Internal Server Error" {
		t.Errorf("stderr:\n%s", r.stderr)
	}

	r = vmctl(t, &fakeClock{}, "top", "-A", "--metrics", dead)
	if r.code != exitError || !strings.Contains(r.stderr, "vmctl: warning: "+dead+" did not answer") ||
		!strings.HasSuffix(r.stderr, "vmctl: no agent answered (1 tried)\n") {
		t.Errorf("all agents down: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestTopUsage: bad command lines (top's and the launcher commands') are exit status 2 and
// touch no agent.
func TestTopUsage(t *testing.T) {
	noKubeconfig(t)
	n1 := newAgent(t, n1First)
	for _, args := range [][]string{
		{"top", "-o", "yaml", "--metrics", n1.metricsURL()},
		{"top", "-A", "web", "--metrics", n1.metricsURL()},
		{"top", "--interval", "0s", "--metrics", n1.metricsURL()},
		{"top", "--metrics", "127.0.0.1:9100"},
		{"top", "a", "b", "--metrics", n1.metricsURL()},
		{"top", "--no-such-flag"},
		{"no-such-command"},
		{"status"}, // no --launcher
		{"--launcher", "/nonexistent/launcher.sock", "qmp", "a", "b"},
		{"--launcher", "/nonexistent/launcher.sock", "qmp-log", "extra"},
		{"--launcher", "/nonexistent/launcher.sock", "status", "extra"},
		{"--launcher", "/nonexistent/launcher.sock", "qmp-log", "--tail", "many"},
	} {
		r := vmctl(t, &fakeClock{}, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--help' for usage.") {
			t.Errorf("%q: exit %d (want %d), stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	if n1.scrapes() != 0 {
		t.Errorf("usage errors scraped the agent %d times", n1.scrapes())
	}
}

// TestHelp: the help of vmctl and vmctl top shows examples and the exit statuses.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"top", "--help"}} {
		r := vmctl(t, &fakeClock{}, args...)
		if r.code != exitOK {
			t.Errorf("%q: exit %d", args, r.code)
		}
		for _, want := range []string{"Examples:", "vmctl top -A", "Exit status (ssh: ssh's own, once ssh runs):\n  0  done\n  1  the call failed", "top NAME: no such VMI", "  4  gave up waiting: drain: VMIs still on the node at --deadline"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%q: no %q in:\n%s", args, want, r.stdout)
			}
		}
	}
}

// TestAnnotationsMatchHeartbeat: vmctl's copies of the Node annotations are the heartbeat's.
func TestAnnotationsMatchHeartbeat(t *testing.T) {
	for _, c := range []struct{ vmctl, heartbeat string }{
		{annotMetricsAddress, controllers.AnnotMetricsAddress},
		{annotHeartbeat, controllers.AnnotHeartbeat},
	} {
		if c.vmctl != c.heartbeat {
			t.Errorf("vmctl reads %q, the heartbeat writes %q", c.vmctl, c.heartbeat)
		}
	}
}
