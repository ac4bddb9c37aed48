// Package lifecycle decides what the node agent does next with a VMI it runs, from what one
// reconcile pass observed: pure functions of plain facts, table-tested without an API server,
// a launcher or a kernel. The reconciler (package controllers) observes, asks Next (before it
// looks at the domain) and NextForDomain (once the launcher answered), and acts.
//
// The order of the checks is the product's semantics: a launcher that exited ends the VMI
// whatever its spec looks like now; a VMI that is not started yet waits for its Secrets,
// networks and images and fails on a spec that cannot run; a domain that runs is never stopped
// because its spec or storage stopped translating or applying since: it is reported and
// retried.
package lifecycle
