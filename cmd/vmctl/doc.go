// Command vmctl is the vmlet CLI. It talks to one vmlet-launcher directly over its socket, the
// one the node agent uses: <run dir>/launcher.sock, where the run dir is <--run-root>/<vmi uid>
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
// --timeout bounds each call (default 30 s; not qmp-log -f or console). Exit status: 0 done,
// 1 the call failed, 2 usage. The console attaches to <run dir>/sockets/console.sock, the
// serial port QEMU serves next to the launcher socket; for a QMP session of your own use
// `socat - UNIX-CONNECT:<run dir>/sockets/qmp-debug.sock` (see package qemu/launcher).
// pause/unpause bypass the VMI: the node agent's next pass sets the domain back to spec.paused.
package main
