// Command vmctl is the vmlet CLI (cobra; `vmctl --help`, `vmctl COMMAND --help`).
//
// `vmctl top [NAME]` shows each VMI's CPU, memory, disk and network use, like
// `kubectl top pod`: it lists the Nodes with kubectl's kubeconfig flags and rules (kube.go,
// shared by the commands that will address VMIs by name), reads each node agent's metrics
// address from the Node annotation vmlet.dev/metrics-address, scrapes every agent twice
// --interval apart and computes the rows with package internal/vmtop. `--metrics URL`
// scrapes given endpoints instead (on a node, without a kubeconfig).
//
//	vmctl top [NAME] [-n NAMESPACE | -A] [--kubeconfig F] [--context C] [--metrics URL]... [--interval 2s] [-o table|json]
//
// The other commands talk to one vmlet-launcher directly over its socket, the one the node
// agent uses: <run dir>/launcher.sock, where the run dir is <--run-root>/<vmi uid>
// (/run/vmlet/<uid> in local mode) or <--launcher-root>/<vmi uid> for launcher pods
// (/var/run/vmlet/launchers/<uid>); the uid is
// `kubectl get vmi NAME -o jsonpath='{.metadata.uid}'`.
//
//	vmctl --launcher /run/vmlet/<uid>/launcher.sock status [--json]
//	vmctl --launcher PATH pause | unpause
//	vmctl --launcher PATH shutdown [--grace 30s]
//	vmctl --launcher PATH qmp '{"execute":"query-status"}'
//	vmctl --launcher PATH qmp-log [-f] [-n 50]
//	vmctl --launcher PATH console            (Ctrl-] quits)
//
// --timeout bounds each call (default 30 s; not qmp-log -f or console; for top each scrape
// and, without --request-timeout, each API request). Exit status: 0 done, 1 the call failed
// (top: no agent answered, no node advertises metrics, the API server failed), 2 usage,
// 3 top NAME found no such VMI in the metrics of the agents that answered. The console
// attaches to <run dir>/sockets/console.sock, the serial port QEMU serves next to the
// launcher socket; for a QMP session of your own use
// `socat - UNIX-CONNECT:<run dir>/sockets/qmp-debug.sock` (see package qemu/launcher).
// pause/unpause bypass the VMI: the node agent's next pass sets the domain back to spec.paused.
package main
