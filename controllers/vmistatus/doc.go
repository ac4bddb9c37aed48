// Package vmistatus is the one status vocabulary of a VirtualMachineInstance, shared by the node
// agent (package controllers) and the cluster controller (controllers/cluster): the reasons they
// write into status.reason, conditions and Events (reason.go), how phases and conditions are
// recorded (SetPhase, SetCondition, Fail, Succeed, Synchronized, NotSynchronized: status.go),
// what a launcher's exit means for its VMI (Exited, ExitMeaning: exit.go) and the Paused
// condition's reason (PausedReason).
//
// It is pure: functions of a VMI's status and plain values, no API server, no Recorder. The
// controllers decide when to call them and send the Events.
//
// The Synchronized condition is written only here: Synchronized (True) when the domain matches
// the spec, NotSynchronized (False, with the reason the agent could not get there) and Fail.
package vmistatus
