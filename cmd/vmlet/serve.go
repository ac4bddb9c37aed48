package main

import (
	"net"

	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vmlet/vmlet/controllers/health"
)

// Flag names of the metrics and health endpoints (the manifests' probes use their defaults).
const (
	flagMetricsAddr = "metrics-bind-address"
	flagHealthAddr  = "health-probe-bind-address"
)

// serveFlags are the metrics and health endpoint flags of agent, controller and local.
type serveFlags struct {
	metricsAddr, healthAddr string
}

// addServeFlags adds --metrics-bind-address and --health-probe-bind-address with defaults
// metrics and probes; ready says what /readyz checks.
func addServeFlags(f *pflag.FlagSet, metrics, probes, ready string) *serveFlags {
	s := &serveFlags{}
	f.StringVar(&s.metricsAddr, flagMetricsAddr, metrics, "Prometheus metrics at http://ADDR"+health.MetricsPath+" (host:port; port 0: any free port; 0: off)")
	f.StringVar(&s.healthAddr, flagHealthAddr, probes, "health probes at http://ADDR"+health.LivenessPath+" (the process is up) and "+
		health.ReadinessPath+" ("+ready+"; /readyz/NAME one check, ?verbose all) (host:port; 0: off)")
	return s
}

// listen opens both endpoints now, so that a port in use is a startup error naming its flag.
func (s *serveFlags) listen() (metrics, probes net.Listener, err error) {
	if metrics, err = health.Listen("--"+flagMetricsAddr, s.metricsAddr); err != nil {
		return nil, nil, err
	}
	if probes, err = health.Listen("--"+flagHealthAddr, s.healthAddr); err != nil {
		if metrics != nil {
			_ = metrics.Close()
		}
		return nil, nil, err
	}
	return metrics, probes, nil
}

// boundAddr is addr with the port the kernel chose for ln (addr's host kept: a wildcard stays
// one); "" without ln.
func boundAddr(addr string, ln net.Listener) string {
	if ln == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ln.Addr().String()
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return net.JoinHostPort(host, port)
}

// serve adds both endpoints to mgr: /healthz answers while the process runs, /readyz runs
// ready.
func serve(mgr manager.Manager, metrics, probes net.Listener, ready health.Checks) error {
	if err := health.AddMetrics(mgr, metrics); err != nil {
		return err
	}
	live := health.Checks{"ping": healthz.Ping}
	return health.AddProbes(mgr, probes, live, ready)
}

// managerChecks are the readiness checks of any vmlet manager: a live request to the API
// server and the manager's caches synced.
func managerChecks(mgr manager.Manager) (health.Checks, error) {
	api, err := health.APIReachable(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	return health.Checks{"api-server": api, "caches": health.CachesSynced(mgr.GetCache())}, nil
}
