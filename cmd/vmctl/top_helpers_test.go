package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from vmctl's output")

// agent is an httptest server playing one node agent's /metrics: its n-th scrape gets
// expositions[n] (the last one again after that); "" answers 500.
type agent struct {
	*httptest.Server
	mu          sync.Mutex
	expositions []string
	served      int
}

func newAgent(t *testing.T, expositions ...string) *agent {
	t.Helper()
	a := &agent{expositions: expositions}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		a.mu.Lock()
		text := a.expositions[min(a.served, len(a.expositions)-1)]
		a.served++
		a.mu.Unlock()
		if text == "" {
			http.Error(w, "agent broken", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write([]byte(text))
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *agent) scrapes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.served
}

// rewind makes the next scrape the first again.
func (a *agent) rewind() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.served = 0
}

func (a *agent) metricsURL() string { return a.URL + "/metrics" }

// deadAgent is the URL of a server that no longer listens.
func deadAgent(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.NotFoundHandler())
	u := s.URL + "/metrics"
	s.Close()
	return u
}

// fakeClock is top's clock in tests: sleep advances it at once and records what it was asked,
// and what the agents had served by then.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
	onWait func()
}

func (f *fakeClock) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) sleep(_ context.Context, d time.Duration) error {
	if f.onWait != nil {
		f.onWait()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = f.t.Add(d)
	f.sleeps = append(f.sleeps, d)
	return nil
}

type result struct {
	stdout, stderr string
	code           int
}

// vmctl runs one command line through the cobra command tree with clock's time.
func vmctl(t *testing.T, clock *fakeClock, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	c := newCLI(nil, &out, &errb)
	c.now, c.sleep = clock.now, clock.sleep
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, c, args)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// golden compares got with testdata/name (rewritten under -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// noKubeconfig makes the kubeconfig rules find no file (not the machine's ~/.kube/config).
func noKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "absent"))
}
