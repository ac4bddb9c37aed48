// Package ops runs the node agent's long operations (image pulls and storage preparation,
// vCPU placement, early network attaches, pause and unpause) outside reconciles and remembers
// their outcome, so that a reconcile returns in milliseconds and one slow VMI never holds a
// worker that another VMI needs.
//
// A reconcile asks a Tracker for the operation of a key (a VMI) with an identity (a hash of
// what the operation is given): the first ask starts it in its own goroutine and says Running;
// when it ends the Tracker calls the wake function with the key, and the next reconcile reads
// the outcome. An ask with another identity cancels the operation in flight and starts the new
// one: the outcome always belongs to the input the reconcile has now. It is the shape of the
// kubelet's pod workers (one goroutine per pod, the sync loop only reads their results) kept to
// one kind of work.
package ops
