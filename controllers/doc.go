// Package controllers holds the reconcilers: node side (VMI, migration source/target, heartbeat)
// and cluster side (launcher pods, migration scheduling). It is the only place where Kubernetes
// types meet the host packages (qemu, devices, network, storage); the translation from a VMI spec
// to a launcher domain spec is a pure, table-tested function here.
package controllers
