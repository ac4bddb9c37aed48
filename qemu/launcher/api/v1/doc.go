// Package launcherv1 is version 1 of the launcher API: launcher.proto and the Go code
// protoc-gen-go and protoc-gen-go-grpc generate from it (hack/genproto.sh). It owns the wire
// contract between the node agent (or vmctl) and vmlet-launcher, nothing else: the server is in
// package launcher, and so is the typed client (launcher.Dial) callers should use.
package launcherv1
