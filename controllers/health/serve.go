package health

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Default ports of the node agent (`vmlet agent`, and `vmlet local` for its whole process) and
// of the cluster controller (`vmlet controller`, controller-runtime's usual ones).
const (
	AgentMetricsPort      = 9250
	AgentHealthPort       = 9251
	ControllerMetricsPort = 8080
	ControllerHealthPort  = 8081
	// Paths of the probes and of the metrics.
	LivenessPath  = "/healthz"
	ReadinessPath = "/readyz"
	MetricsPath   = "/metrics"
)

// ErrListen is a bind address that cannot be listened on (in use, not this machine's, bad).
var ErrListen = errors.New("cannot listen")

// shutdownTimeout bounds the wait for open scrapes and probes when the process stops.
const shutdownTimeout = 5 * time.Second

// Off reports whether a bind address turns its endpoint off ("" or "0", controller-runtime's
// convention).
func Off(addr string) bool { return addr == "" || addr == "0" }

// Listen opens addr (host:port; port 0 lets the kernel choose); nil for an address that turns
// the endpoint off. flag names the setting in the error.
func Listen(flag, addr string) (net.Listener, error) {
	if Off(addr) {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrListen, flag, addr, err)
	}
	return ln, nil
}

// Checks are named health checks (healthz.Checker: nil error means healthy).
type Checks map[string]healthz.Checker

// AddMetrics makes mgr serve controller-runtime's registry (its own metrics and whatever vmlet
// registers there) as Prometheus text on ln at /metrics. A nil ln adds nothing.
func AddMetrics(mgr manager.Manager, ln net.Listener) error {
	if ln == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	return add(mgr, "metrics", ln, mux)
}

// AddProbes makes mgr serve /healthz (live: the checks in live) and /readyz (ready) on ln
// (Handler). A nil ln adds nothing.
func AddProbes(mgr manager.Manager, ln net.Listener, live, ready Checks) error {
	if ln == nil {
		return nil
	}
	mux := http.NewServeMux()
	for path, checks := range map[string]Checks{LivenessPath: live, ReadinessPath: ready} {
		h := http.StripPrefix(path, Handler(checks))
		mux.Handle(path, h)
		mux.Handle(path+"/", h)
	}
	return add(mgr, "health probes", ln, mux)
}

// Handler runs the checks (all of them at "/", one at "/NAME") and answers 200 with "ok", or
// 500 with a line per check, "[+]NAME ok" or "[-]NAME failed: ERROR" (the error in full, unlike
// controller-runtime's handler, which withholds it: what fails here is what an operator needs,
// e.g. the VMIs whose launchers do not answer). "?verbose" lists every check on success too,
// as the Kubernetes components' health endpoints do.
func Handler(checks Checks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		names := slices.Sorted(maps.Keys(checks))
		if one := strings.Trim(req.URL.Path, "/"); one != "" {
			if _, ok := checks[one]; !ok {
				http.NotFound(w, req)
				return
			}
			names = []string{one}
		}
		var b strings.Builder
		failed := false
		for _, n := range names {
			if err := checks[n](req); err != nil {
				failed = true
				fmt.Fprintf(&b, "[-]%s failed: %v\n", n, err)
			} else {
				fmt.Fprintf(&b, "[+]%s ok\n", n)
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		switch _, verbose := req.URL.Query()["verbose"]; {
		case failed:
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%scheck failed\n", b.String())
		case verbose:
			fmt.Fprintf(w, "%scheck passed\n", b.String())
		default:
			fmt.Fprint(w, "ok")
		}
	})
}

func add(mgr manager.Manager, name string, ln net.Listener, h http.Handler) error {
	to := shutdownTimeout
	srv := &manager.Server{
		Name:            name,
		Server:          &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		Listener:        ln,
		ShutdownTimeout: &to,
	}
	if err := mgr.Add(srv); err != nil {
		_ = ln.Close()
		return fmt.Errorf("add %s server: %w", name, err)
	}
	return nil
}
