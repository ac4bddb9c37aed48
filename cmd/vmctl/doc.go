// Command vmctl is the vmlet CLI (cobra; `vmctl --help`, `vmctl COMMAND --help`), also a
// kubectl plugin: installed on PATH as kubectl-vmctl (`make install-plugin`) it runs as
// `kubectl vmctl ...`, the same commands, its help saying "kubectl vmctl".
//
// The VM commands address a VMI by NAME through the Kubernetes API with kubectl's kubeconfig
// flags and rules (kube.go: --kubeconfig, $KUBECONFIG, --context, -n, else the context's
// namespace, else "default"). The streams and QEMU-level ones go through the aggregated API
// subresources.vmlet.dev/v1alpha1 (package internal/subresclient; websockets with KubeVirt's
// plain.kubevirt.io subprotocol):
//
//	vmctl console NAME                      serial console, raw terminal, Ctrl-] quits
//	vmctl vnc NAME [--port N]               local VNC port for a viewer; vnc screenshot NAME -o F.png
//	vmctl qmp NAME [COMMAND]                one QMP command, or the QMP shell (qmpshell.go)
//	vmctl qmp-log NAME [-f] [--tail N]      the QMP traffic log with callers
//	vmctl guestosinfo|userlist|fslist NAME [-o json|table]
//	vmctl port-forward NAME LOCAL:GUEST     one websocket per TCP connection
//	vmctl ssh [USER@]NAME [-- SSH-ARGS]     port-forward to 22 + the system's ssh
//
// and the others through the vmlet.dev API itself: pause/unpause NAME set spec.paused with a
// merge patch (the node agent keeps it), migrate NAME creates a VirtualMachineInstanceMigration
// (generateName NAME-migration-; --wait follows its phase), migrate-cancel NAME deletes the
// VMI's migrations that have not ended (the migration controller aborts).
//
// `vmctl top [NAME]` shows each VMI's CPU, memory, disk and network use, like
// `kubectl top pod`, from the node agents' metrics (Node annotation vmlet.dev/metrics-address,
// or --metrics URL); `vmctl drain NODE` / `uncordon NODE` drain a node of its VMIs;
// `vmctl evacuate-cancel (NAME | --node NODE)` cancels an evacuation an eviction started.
//
// Node-local work, as root on the node: --launcher PATH talks to one vmlet-launcher over its
// socket, <run dir>/launcher.sock, where the run dir is <--run-root>/<vmi uid>
// (/run/vmlet/<uid> in local mode) or <--launcher-root>/<vmi uid> for launcher pods
// (/var/run/vmlet/launchers/<uid>). status and shutdown need it; console, qmp (one command or
// the shell), qmp-log, pause and unpause take it instead of NAME. A launcher-level pause
// bypasses the VMI: the node agent's next pass sets the domain back to spec.paused.
//
// Exit statuses are defined once, in exitcodes.go, and printed in every command's help.
package main
