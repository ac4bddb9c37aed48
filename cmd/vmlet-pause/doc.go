// Command vmlet-pause is the pod sandbox's process (containerd's sandbox_image,
// vmlet.dev/pause:dev): it holds the pod's namespaces open and does nothing else. It sleeps
// until SIGTERM or SIGINT (then exits 0) and, as PID 1 of a pod that shares its PID namespace,
// reaps the zombies that are reparented to it. It is a child subreaper too, so it reaps
// orphans of its own descendants even when it is not PID 1. The equivalent of Kubernetes'
// build/pause/linux/pause.c, in Go so it builds static with the rest of vmlet (CGO_ENABLED=0).
package main
