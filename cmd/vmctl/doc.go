// Command vmctl is the vmlet CLI. For now it talks to one launcher directly over its socket
// (the node agent comes later):
//
//	vmctl --launcher /run/vmlet/<id>/launcher.sock status [--json]
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
package main
