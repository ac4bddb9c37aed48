// Package osthread runs a function on an OS thread that is thrown away afterwards, for the
// system calls that change the calling thread alone and are not worth undoing: entering a
// network namespace (setns, unshare) to open a tap or a socket there, dropping capabilities
// before a fork.
//
// Go ends a thread whose goroutine exits while locked to it (runtime.LockOSThread without an
// unlock) — except the process's main thread, which it parks forever instead, still in whatever
// state the function left it. A main thread parked in a pod's network namespace keeps that
// namespace alive after the pod is gone and shows it as the process's own in
// /proc/PID/ns/net (found by the two-node e2e test: a source pod's network namespace outlived
// the pod, held by the agent). Discarded therefore never runs the function on the main thread:
// when its goroutine lands there, it holds the main thread (so that no other goroutine can run
// on it) while another goroutine, necessarily on another thread, does the work, and gives the
// main thread back untouched.
package osthread
