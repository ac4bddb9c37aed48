// Package imagebuild builds vmlet's own OCI images without a container engine, with
// go-containerregistry: vmlet.dev/vmlet:dev (the vmlet and vmctl binaries, and qemu-img the
// agent runs), vmlet.dev/vmlet-launcher:dev (vmlet-launcher and QEMU from Debian packages) and
// vmlet.dev/pause:dev (cmd/vmlet-pause, containerd's sandbox image). hack/images.sh (`make
// images`) drives it and writes each image as a `docker save` tarball that
// `ctr -n k8s.io images import FILE` accepts.
//
// Planning is pure: Plan turns a Spec (host files → paths in the image, modes, symlinks,
// folders) into the sorted list of tar entries of the image's single layer, with every parent
// folder, checking that paths are absolute, clean and unique. The apply side is thin: Layer
// reads the host files into a tar, Build adds the image config (entrypoint, env, user) and
// WriteTarball writes the archive.
//
// Images are reproducible: entries sorted by path, owner 0:0 with no user or group names, one
// fixed modification time (SOURCE_DATE_EPOCH, else the Unix epoch) on every entry and in the
// config, no host-dependent metadata, gzip without a header time. The same inputs give the same
// digests on every machine.
//
// Equivalent by hand: a Dockerfile `FROM scratch` + `COPY --chmod=...` per file, built with
// `docker build` under SOURCE_DATE_EPOCH and rewrite-timestamp, then `docker save IMG > FILE`.
package imagebuild
