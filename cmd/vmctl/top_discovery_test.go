package main

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmlet/vmlet/test/apienv"
	"github.com/vmlet/vmlet/test/prereq"
)

// TestTopDiscovery runs `vmctl top` against a real kube-apiserver whose Nodes advertise the
// test agents in vmlet.dev/metrics-address: it finds them through the kubeconfig (--kubeconfig
// and $KUBECONFIG), scrapes them, names the node of an agent that does not answer, warns about
// vmlet nodes without (or with a malformed) address, skips non-vmlet nodes, and takes a
// series' node from the Node when the agent leaves the label out.
func TestTopDiscovery(t *testing.T) {
	prereq.APIServer(t)
	env := apienv.StartT(t, apienv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	n1 := newAgent(t, n1First, n1Second)
	noNodeLabel := func(s string) string { return strings.ReplaceAll(s, `,node="n2"`, "") }
	n2 := newAgent(t, noNodeLabel(n2First), noNodeLabel(n2Second))
	dead := deadAgent(t)
	hostPort := func(url string) string {
		return strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")
	}
	nodes := map[string]map[string]string{
		"n1": {annotMetricsAddress: hostPort(n1.metricsURL()), annotHeartbeat: "2026-12-01T00:00:00Z"},
		"n2": {annotMetricsAddress: hostPort(n2.metricsURL())},
		"n3": {annotMetricsAddress: hostPort(dead)},
		"n4": {annotHeartbeat: "2026-12-01T00:00:00Z"}, // an agent with metrics off
		"n5": nil,                                      // not a vmlet node
		"n6": {annotMetricsAddress: "nope"},
		// n1's agent serves n7 too (one process, several nodes, as vmlet local --nodes 2):
		// scraped once, its VMIs listed once.
		"n7": {annotMetricsAddress: hostPort(n1.metricsURL()), annotHeartbeat: "2026-12-01T00:00:00Z"},
	}
	for name, annots := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annots}}
		if err := env.Client.Create(ctx, n); err != nil {
			t.Fatalf("create node %s: %v", name, err)
		}
	}
	wantWarnings := []string{
		"vmctl: warning: node n4 runs a vmlet agent that serves no metrics (no vmlet.dev/metrics-address annotation)",
		`vmctl: warning: node n6: vmlet.dev/metrics-address "nope" is not host:port`,
		"vmctl: warning: node n3 (" + dead + ") did not answer: scrape: Get ",
	}
	checkWarnings := func(t *testing.T, stderr string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) != len(wantWarnings) {
			t.Fatalf("stderr has %d lines, want %d:\n%s", len(lines), len(wantWarnings), stderr)
		}
		for i, w := range wantWarnings {
			if !strings.HasPrefix(lines[i], w) {
				t.Errorf("stderr line %d:\n%s\nwant it to start with:\n%s", i, lines[i], w)
			}
		}
	}

	t.Run("--kubeconfig", func(t *testing.T) {
		noKubeconfig(t)
		r := vmctl(t, &fakeClock{}, "top", "-A", "--kubeconfig", env.Kubeconfig, "--interval", "10s")
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
		golden(t, "top-all.golden", r.stdout) // the same figures as through --metrics
		checkWarnings(t, r.stderr)
	})
	t.Run("$KUBECONFIG and NAME", func(t *testing.T) {
		n1.rewind()
		n2.rewind()
		t.Setenv("KUBECONFIG", env.Kubeconfig)
		r := vmctl(t, &fakeClock{}, "top", "api", "-n", "prod", "--interval", "10s")
		if r.code != exitOK {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
		want := "NAMESPACE   NAME   NODE   CPU(%)   MEMORY     DISK-READ   DISK-WRITE   NET-RX      NET-TX\n" +
			"prod        api    n2     150.0%   476.8MiB   -           -            97.7KiB/s   -\n"
		if r.stdout != want {
			t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
		}
		checkWarnings(t, r.stderr)
		r = vmctl(t, &fakeClock{}, "top", "gone", "--interval", "10s")
		if r.code != exitNotFound || !strings.HasSuffix(r.stderr, "vmctl: vmi default/gone not found in the metrics of 2 agent(s); 1 did not answer (see the warnings)\n") {
			t.Errorf("top gone: exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("no node advertises metrics", func(t *testing.T) {
		for _, name := range []string{"n1", "n2", "n3", "n6", "n7"} {
			if err := env.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
				t.Fatalf("delete node %s: %v", name, err)
			}
		}
		noKubeconfig(t)
		r := vmctl(t, &fakeClock{}, "top", "-A", "--kubeconfig", env.Kubeconfig)
		want := "vmctl: no node advertises its agent's metrics (annotation vmlet.dev/metrics-address on 2 node(s) listed); use --metrics URL\n"
		if r.code != exitError || !strings.HasSuffix(r.stderr, want) || !strings.HasPrefix(r.stderr, wantWarnings[0]) {
			t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
	t.Run("API server unreachable", func(t *testing.T) {
		noKubeconfig(t)
		r := vmctl(t, &fakeClock{}, "top", "-A", "--kubeconfig", env.Kubeconfig, "--server", "https://127.0.0.1:1")
		if r.code != exitError || !strings.Contains(r.stderr, "vmctl: list nodes: ") {
			t.Errorf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	})
}
