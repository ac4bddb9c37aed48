// Package backoff is the kubelet's per-item back-off (client-go util/flowcontrol.Backoff, as
// pkg/kubelet/images uses it for image pulls) with what the node agent needs on top: the time
// of the next try, to tell the user and to requeue at; the failure's cause, to repeat while
// waiting; and removal of all entries of one object. It is pure: time comes from an injectable
// clock.
package backoff
