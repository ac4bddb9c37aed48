// Package storagetest builds the images storage tests pull, and serves them: containerDisk and
// kernelBoot images made in Go (a tar layer appended to an empty image), an in-process
// registry (go-containerregistry's pkg/registry over HTTP on 127.0.0.1, so the real registry
// protocol runs) that counts requests and can corrupt chosen blobs, and OCI layouts on disk.
//
// Equivalent by hand: a Dockerfile `FROM scratch` + `ADD disk.qcow2 /disk/`, `docker push`.
package storagetest
