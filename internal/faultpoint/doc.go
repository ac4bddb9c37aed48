// Package faultpoint stops a vmlet process at a named moment so that a test can kill it there,
// as etcd's gofail failpoints do: the fault matrix (cmd/vmlet TestFaultMatrix) SIGKILLs the node
// agent in windows too short to hit from outside, such as between two storage steps or between
// a launcher's removal and the rest of a VMI's teardown.
//
// It is off unless the process was started with VMLET_FAULTPOINTS set, and then costs a map
// lookup per Hit. VMLET_FAULTPOINTS is a comma-separated list of NAME or NAME:DETAIL; a Hit of
// an armed point writes a file named after the point into VMLET_FAULTPOINT_DIR (the test's
// sign), logs the stop on standard error and blocks the calling goroutine for good: the process
// stays exactly there until it is killed. Each point stops once per process; the rest of the
// process runs on.
//
// Points are named where they are hit (grep faultpoint.Hit); a name says the moment,
// e.g. "teardown.launcher-removed", and DETAIL narrows it, e.g. "storage.action-done:empty".
package faultpoint
