package main_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vmlet/vmlet/controllers"
	"github.com/vmlet/vmlet/selinuxlabel"
	"github.com/vmlet/vmlet/test/poll"
)

var endpointsLine = regexp.MustCompile(`vmlet local: metrics http://(\S+)/metrics, health http://(\S+)/readyz`)

// assertLocalEndpoints checks the one metrics and one health endpoint of a running `vmlet
// local` (ports the kernel chose, as it printed them): /healthz and /readyz answer 200 with
// the API server, the caches and the launchers checked; /metrics serves Prometheus text; the
// Node publishes that metrics address and its facts.
func assertLocalEndpoints(t *testing.T, p *localProc, c client.Client) {
	t.Helper()
	m := endpointsLine.FindStringSubmatch(p.out.String())
	if m == nil {
		t.Fatalf("vmlet local did not print its endpoints:\n%s", tailOf(p.out.String()))
	}
	metrics, probes := m[1], m[2]
	httpWait(t, probes, "/healthz", "ok")
	se := selinuxlabel.Probe() // what this host is: disabled here, enforcing on an SELinux host
	httpWait(t, probes, "/readyz?verbose", "[+]api-server ok", "[+]caches ok", "[+]launchers ok", "[+]selinux-"+se.Mode+" ok")
	httpWait(t, metrics, "/metrics", "# TYPE controller_runtime_reconcile_total counter")
	n := &corev1.Node{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: localNode}, n); err != nil {
		t.Fatal(err)
	}
	if got := n.Labels[controllers.LabelSELinux]; got != se.Mode {
		t.Errorf("node label %s=%q, the host's SELinux is %s", controllers.LabelSELinux, got, se.Mode)
	}
	if got, ok := n.Annotations[controllers.AnnotSELinuxPolicy]; got != se.PolicyType || ok != (se.PolicyType != "") {
		t.Errorf("node annotation %s=%q (present %v), the host's policy is %q", controllers.AnnotSELinuxPolicy, got, ok, se.PolicyType)
	}
	if got := n.Annotations[controllers.AnnotMetricsAddress]; got != metrics {
		t.Errorf("node publishes metrics at %q, vmlet local serves them at %s", got, metrics)
	}
	for _, k := range []string{controllers.AnnotQEMUVersion, controllers.AnnotCPUModel, controllers.AnnotDefaultCPUModel, controllers.AnnotHeartbeatInterval} {
		if n.Annotations[k] == "" {
			t.Errorf("node annotation %s empty (%v)", k, n.Annotations)
		}
	}
}

// httpWait waits until GET http://addr+path answers 200 with every want in its body.
func httpWait(t *testing.T, addr, path string, want ...string) {
	t.Helper()
	poll.Until(t, time.Minute, "GET "+addr+path, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, w := range want {
			if !strings.Contains(string(b), w) {
				return false, fmt.Sprintf("%d %.300q lacks %q", resp.StatusCode, b, w)
			}
		}
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %.300q", resp.StatusCode, b)
	})
}

// TestLocalPortInUse: a health port in use is a startup error naming the flag, before any
// control plane starts.
func TestLocalPortInUse(t *testing.T) {
	s := newLocalSetup(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := s.run(t, append(s.commonArgs(), "--demo", "", "--health-probe-bind-address", ln.Addr().String())...)
	err = p.wait(t, time.Minute)
	out := p.out.String()
	if err == nil || !strings.Contains(out, "--health-probe-bind-address "+ln.Addr().String()) || !strings.Contains(out, "address already in use") {
		t.Fatalf("vmlet local with its health port in use: exit %v, output:\n%s", err, out)
	}
	if strings.Contains(out, "starting etcd") {
		t.Errorf("the control plane was started before the port was checked:\n%s", out)
	}
}
