// Package health serves a vmlet process's Prometheus metrics and its health probes (/healthz:
// the process is up; /readyz: it can do its job) on listeners opened before the manager starts,
// so that a port in use is a startup error and a port chosen by the kernel (":0") is known. It
// also holds the readiness checks the node agent and the cluster controller share: a live
// request to the API server and the manager's caches synced.
package health
