// Package subrestest is an in-memory subresources.vmlet.dev/v1alpha1 server for tests of its
// clients (vmctl): an httptest TLS server that answers the contract's paths for the VMIs it is
// given, authenticates bearer tokens to user names, refuses what a user may not do with a
// Status 403 as the real server's RBAC and QMP allow-list do, and plays the launcher behind
// each VMI: a scripted QMP peer (query-status, stop, cont, query-commands, query-name, quit,
// with a QMP log that records each command's caller), a console that echoes what it gets
// (one client at a time; a new one takes over), an RFB greeting on vnc, a PNG screenshot,
// guest agent data, and portforward/{port} to a TCP address the test chose.
//
// Kubeconfig writes a kubeconfig file for the server, so a test drives the client through
// kubectl's configuration rules.
package subrestest
